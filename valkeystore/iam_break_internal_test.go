package valkeystore

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/valkey-io/valkey-go"
)

// A presigned token is only as valid as the credentials that signed it:
// signed with temporary credentials (an assumed role, ECS or EC2 instance
// credentials, SSO) that expire a minute later, it stops authenticating
// then, not after 15 minutes. IAMAuth reuses it for 10 minutes whatever
// the credentials' Expires, so every connection made in the other 9
// minutes presents a token signed by expired credentials and is refused.
func TestBreakIAMTokenNotReusedPastItsCredentialsExpiry(t *testing.T) {
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
