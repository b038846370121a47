package testenv

import (
	"archive/zip"
	"bytes"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
)

// Function creates a function on moto_server's Lambda from in, filling
// what it leaves out: the name (Name(tb)), a role made for it (moto, as
// AWS, wants one that exists), the runtime provided.al2023, the handler
// bootstrap, and a zip holding a bootstrap that is never run (moto keeps
// the code; tests run their own binary). It returns what Lambda answered.
func Function(tb testing.TB, cfg aws.Config, in lambda.CreateFunctionInput) *lambda.CreateFunctionOutput {
	tb.Helper()
	ctx := tb.Context()
	if in.FunctionName == nil {
		in.FunctionName = aws.String(Name(tb))
	}
	if in.Role == nil {
		role, err := iam.NewFromConfig(cfg).CreateRole(ctx, &iam.CreateRoleInput{
			RoleName:                 in.FunctionName,
			AssumeRolePolicyDocument: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}`),
		})
		if err != nil {
			tb.Fatalf("testenv: role for %s: %v", aws.ToString(in.FunctionName), err)
		}
		in.Role = role.Role.Arn
	}
	if in.Runtime == "" {
		in.Runtime = lambdatypes.RuntimeProvidedal2023
	}
	if in.Handler == nil {
		in.Handler = aws.String("bootstrap")
	}
	if in.Code == nil {
		in.Code = &lambdatypes.FunctionCode{ZipFile: zipOf(tb, "bootstrap", "#!/bin/sh\nexit 1\n")}
	}
	out, err := lambda.NewFromConfig(cfg).CreateFunction(ctx, &in)
	if err != nil {
		tb.Fatalf("testenv: create function %s: %v", aws.ToString(in.FunctionName), err)
	}
	return out
}

// zipOf is a zip archive holding one executable file.
func zipOf(tb testing.TB, name, body string) []byte {
	tb.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	h := &zip.FileHeader{Name: name, Method: zip.Deflate}
	h.SetMode(0o755)
	f, err := w.CreateHeader(h)
	if err == nil {
		_, err = f.Write([]byte(body))
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		tb.Fatalf("testenv: zip: %v", err)
	}
	return b.Bytes()
}
