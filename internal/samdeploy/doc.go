// Package samdeploy does what `sam build && sam deploy` do, against a local
// AWS: moto_server, which serves S3, CloudFormation, Lambda's control plane,
// SQS and DynamoDB on one loopback port. It reads a samconfig.toml
// environment, builds each function of the SAM template with the Makefile's
// build-<LogicalID> target, zips it as `sam package` would, uploads it to
// the local S3, transforms the template with aws-sam-translator (the library
// behind CloudFormation's AWS::Serverless transform, which moto lacks; run by
// scripts/sam-transform with the project's Python), and creates or updates
// the stack (with CreateStack and UpdateStack: moto does not work out the
// outputs of a stack that a change set made). It talks to the loopback
// endpoint only, with static test credentials.
//
// It checks before deploying what CloudFormation would and moto does not:
// every parameter has a value that its AllowedValues and AllowedPattern
// accept, the capabilities cover the template's IAM resources, and each
// function's bootstrap is a Linux binary for the function's Architectures.
// The payment sample's `go run ./functions/payment/demo deploy` and `make
// deploy-local` run it; docs/deploy-with-sam.md says what it proves and what
// only a real AWS account can.
package samdeploy
