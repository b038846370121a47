#!/usr/bin/env python3
"""Usage: sam-transform TEMPLATE REGION [--param NAME=VALUE]... [--code LOGICAL_ID=s3://BUCKET/KEY]...

Transforms the SAM template TEMPLATE into the CloudFormation template that
CloudFormation's AWS::Serverless-2016-10-31 transform makes of it, with
aws-sam-translator, the library that transform runs, and writes it as JSON
to standard output. It is what `sam deploy` hands to CloudFormation, done on
this machine for a CloudFormation that has no SAM transform (moto's): see
`go run ./functions/payment/demo deploy -h` and docs/deploy-with-sam.md.

--code replaces the CodeUri of a function with the S3 object its package was
uploaded to, as `sam package` does; --param gives a template parameter's
value (the others take their defaults). REGION is the stack's region, for
the translator's pseudo parameters (AWS::Region, AWS::Partition). Nothing
is sent anywhere: the translator gets a region-only boto3 session and no way
to look up managed policies, whose ARNs it takes from the map it bundles.

The first line on standard error names the translator's version. Exit
status: 0 transformed, 1 the template is not valid SAM (the translator's
messages on standard error), 2 bad arguments or no aws-sam-translator.
"""

import argparse
import json
import sys


def fail(status, msg):
    print("sam-transform: " + msg, file=sys.stderr)
    sys.exit(status)


def pair(text):
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: want NAME=VALUE")
    return name, value


def main():
    p = argparse.ArgumentParser(prog="sam-transform", description=__doc__.split("\n\n")[1])
    p.add_argument("template")
    p.add_argument("region")
    p.add_argument("--param", type=pair, action="append", default=[])
    p.add_argument("--code", type=pair, action="append", default=[])
    args = p.parse_args()

    try:
        import boto3
        import samtranslator
        from samtranslator.model.exceptions import InvalidDocumentException
        from samtranslator.parser.parser import Parser
        from samtranslator.public.translator import Translator
        from samtranslator.yaml_helper import yaml_parse
    except ImportError as e:
        fail(2, f"{e}: this Python ({sys.executable}) has no aws-sam-translator; run 'make deps'")
    print(f"sam-transform: aws-sam-translator {samtranslator.__version__}", file=sys.stderr)

    try:
        with open(args.template, encoding="utf-8") as f:
            template = yaml_parse(f.read())
    except (OSError, ValueError) as e:
        fail(2, f"{args.template}: {e}")
    except Exception as e:  # yaml.YAMLError, without importing yaml here
        fail(1, f"{args.template}: {e}")

    resources = template.get("Resources") if isinstance(template, dict) else None
    if not isinstance(resources, dict):
        fail(1, f"{args.template}: no Resources")
    for logical_id, uri in args.code:
        res = resources.get(logical_id)
        if not isinstance(res, dict) or res.get("Type") != "AWS::Serverless::Function":
            fail(2, f"--code {logical_id}: the template has no AWS::Serverless::Function {logical_id}")
        if not uri.startswith("s3://"):
            fail(2, f"--code {logical_id}={uri}: want s3://BUCKET/KEY")
        res.setdefault("Properties", {})["CodeUri"] = uri

    declared = template.get("Parameters") or {}
    for name, _ in args.param:
        if name not in declared:
            fail(2, f"--param {name}: the template declares no parameter {name}")

    def no_policy_lookup():
        # Reached only for a managed policy name that the bundled map lacks:
        # the real transform would ask IAM; here nothing may leave the machine.
        raise RuntimeError("a managed policy is not in aws-sam-translator's bundled map, and IAM is not asked")

    session = boto3.session.Session(region_name=args.region)
    translator = Translator(managed_policy_map=None, sam_parser=Parser(), boto_session=session)
    try:
        out = translator.translate(
            template,
            parameter_values=dict(args.param),
            feature_toggle=None,
            get_managed_policy_map=no_policy_lookup,
        )
    except InvalidDocumentException as e:
        for cause in e.causes:
            print(f"sam-transform: {cause.message}", file=sys.stderr)
        fail(1, f"{args.template} is not a valid SAM template ({len(e.causes)} error(s) above)")
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
