package valkeystore

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/valkey-io/valkey-go"
)

func TestIAMTokenIsAPresignedConnectForTheUser(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := &IAMAuth{
		Config:    aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")},
		CacheName: "payments", UserID: "payments-fn", Serverless: true,
		now: func() time.Time { return at },
	}
	got, err := a.Credentials(valkey.AuthCredentialsContext{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Username != "payments-fn" {
		t.Errorf("user %q; want payments-fn", got.Username)
	}
	if want := at.Add(11 * time.Hour); !got.RefreshAfter.Equal(want) {
		t.Errorf("RefreshAfter %v; want %v", got.RefreshAfter, want)
	}
	host, query, ok := strings.Cut(got.Password, "/?")
	if !ok || host != "payments" || strings.Contains(got.Password, "://") {
		t.Fatalf("token %q; want payments/?<query>, without a scheme", got.Password)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"Action":              "connect",
		"User":                "payments-fn",
		"ResourceType":        "ServerlessCache",
		"X-Amz-Expires":       "900",
		"X-Amz-Algorithm":     "AWS4-HMAC-SHA256",
		"X-Amz-Date":          "20260102T030405Z",
		"X-Amz-Credential":    "AKIDEXAMPLE/20260102/eu-west-1/elasticache/aws4_request",
		"X-Amz-SignedHeaders": "host",
	} {
		if q.Get(k) != want {
			t.Errorf("%s = %q; want %q", k, q.Get(k), want)
		}
	}
	if len(q.Get("X-Amz-Signature")) != 64 {
		t.Errorf("X-Amz-Signature %q; want 64 hex digits", q.Get("X-Amz-Signature"))
	}
}

func TestIAMTokenIsReusedForTenMinutesThenSignedAgain(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := &IAMAuth{
		Config:    aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", "")},
		CacheName: "c", UserID: "u",
		now: func() time.Time { return at },
	}
	first, err := a.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	at = at.Add(10*time.Minute - time.Second)
	if again, _ := a.Token(t.Context()); again != first {
		t.Error("token signed again before 10 minutes; want the cached one")
	}
	at = at.Add(time.Second)
	if next, _ := a.Token(t.Context()); next == first {
		t.Error("token reused after 10 minutes; want a fresh one (tokens last 15)")
	}
}

func TestIAMAuthNamesWhatIsMissing(t *testing.T) {
	for name, a := range map[string]*IAMAuth{
		"no cache":  {Config: aws.Config{Region: "r", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}, UserID: "u"},
		"no region": {Config: aws.Config{Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}, CacheName: "c", UserID: "u"},
		"no creds":  {Config: aws.Config{Region: "r"}, CacheName: "c", UserID: "u"},
	} {
		if _, err := a.Token(t.Context()); err == nil {
			t.Errorf("%s: got a token; want an error", name)
		}
	}
}

// A presigned token is only as valid as the credentials that signed it:
// signed with temporary credentials (an assumed role, ECS or EC2 instance
// credentials, SSO) that expire a minute later, it stops authenticating
// then, not after 15 minutes. IAMAuth reuses it for 10 minutes whatever
// the credentials' Expires, so every connection made in the other 9
// minutes presents a token signed by expired credentials and is refused.
func TestIAMTokenIsSignedAgainWhenItsCredentialsExpire(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	keys := 0
	provider := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		keys++
		return aws.Credentials{AccessKeyID: "ASIA" + strings.Repeat("X", keys), SecretAccessKey: "s", SessionToken: "tok",
			CanExpire: true, Expires: at.Add(time.Minute)}, nil
	})
	a := &IAMAuth{Config: aws.Config{Region: "eu-west-1", Credentials: provider}, CacheName: "c", UserID: "u",
		now: func() time.Time { return at }}
	first, err := a.Credentials(valkey.AuthCredentialsContext{})
	if err != nil {
		t.Fatal(err)
	}
	at = at.Add(2 * time.Minute) // the signing credentials expired a minute ago
	next, err := a.Credentials(valkey.AuthCredentialsContext{})
	if err != nil {
		t.Fatal(err)
	}
	q, _ := url.ParseQuery(strings.SplitN(next.Password, "?", 2)[1])
	if next.Password == first.Password {
		t.Errorf("2 minutes after signing, with the signing credentials expired for a minute: got the same token (signed with %s, expired at %v); want a token signed again with fresh credentials",
			strings.SplitN(q.Get("X-Amz-Credential"), "/", 2)[0], at.Add(-time.Minute))
	}
}
