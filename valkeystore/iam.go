package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/valkey-io/valkey-go"
)

// ElastiCache IAM authentication tokens are valid for 15 minutes from
// signing; a connection authenticated with one is closed by ElastiCache
// after 12 hours unless it authenticates again.
const (
	iamTokenValidity = 15 * time.Minute
	// iamTokenReuse is how long a token is handed to new connections: a
	// token is signed again 5 minutes before it would lapse, so that a
	// connection made with it, slow TLS handshake and all, never presents
	// one that has.
	iamTokenReuse = 10 * time.Minute
	// iamReauthAfter is when each connection authenticates again, well
	// before ElastiCache's 12 hours.
	iamReauthAfter = 11 * time.Hour
	// emptyPayloadHash is the SHA-256 of an empty body.
	emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// IAMAuth authenticates connections to ElastiCache (Valkey or Redis OSS)
// with IAM: the password of each new connection is a token presigned with
// SigV4 (service "elasticache", Action=connect, the user ID), from the
// function's own credentials, so no secret is stored anywhere. Give its
// Credentials method to the client, with TLS (ElastiCache accepts IAM
// authentication only over TLS):
//
//	auth := &valkeystore.IAMAuth{Config: cfg, CacheName: "payments", UserID: "payments-fn"}
//	client, err := valkey.NewClient(valkeystore.WithLambdaDefaults(valkey.ClientOption{
//		InitAddress:       []string{addr},
//		TLSConfig:         &tls.Config{},
//		AuthCredentialsFn: auth.Credentials,
//	}))
//
// The user must exist in the cache's user group with IAM authentication
// on, and the function's role must allow elasticache:Connect on the cache
// and the user. A token is reused for 10 of its 15 minutes (less when the
// credentials that signed it expire sooner), so a burst of
// new connections signs once. It is safe for concurrent use.
type IAMAuth struct {
	// Config gives the region and the credentials to sign with.
	Config aws.Config
	// CacheName is the replication group ID, or the serverless cache's
	// name; UserID is the ElastiCache user's ID, also the AUTH user name.
	CacheName, UserID string
	// Serverless says the cache is an ElastiCache Serverless cache.
	Serverless bool

	now        func() time.Time // time.Now unless a test sets it
	mu         sync.Mutex
	token      string
	signedAt   time.Time
	reuseUntil time.Time // 10 minutes after signing, or before the signing credentials expire
}

// Credentials returns the user ID and a valid token, signing a new token
// when the last one is older than 10 minutes. It fits
// valkey.ClientOption.AuthCredentialsFn, and asks the client to
// authenticate each connection again after 11 hours.
func (a *IAMAuth) Credentials(valkey.AuthCredentialsContext) (valkey.AuthCredentials, error) {
	token, err := a.Token(context.Background())
	if err != nil {
		return valkey.AuthCredentials{}, err
	}
	return valkey.AuthCredentials{Username: a.UserID, Password: token, RefreshAfter: a.clock().Add(iamReauthAfter)}, nil
}

// Token returns a token for a new connection, signed at most 10 minutes
// ago.
func (a *IAMAuth) Token(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock()
	if a.token != "" && now.Before(a.reuseUntil) && !now.Before(a.signedAt) {
		return a.token, nil
	}
	token, creds, err := a.sign(ctx, now)
	if err != nil {
		return "", err
	}
	a.token, a.signedAt, a.reuseUntil = token, now, now.Add(iamTokenReuse)
	// A presigned token is only as good as the credentials that signed
	// it: temporary ones (an assumed role, ECS, SSO) may expire first.
	if until := creds.Expires.Add(-iamCredentialsMargin); creds.CanExpire && until.Before(a.reuseUntil) {
		a.reuseUntil = until
	}
	return token, nil
}

func (a *IAMAuth) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// iamCredentialsMargin: a token is not reused within this of its signing
// credentials' expiry, so that a connection made with it still
// authenticates.
const iamCredentialsMargin = time.Minute

func (a *IAMAuth) sign(ctx context.Context, now time.Time) (string, aws.Credentials, error) {
	switch {
	case a.CacheName == "" || a.UserID == "":
		return "", aws.Credentials{}, errors.New("valkeystore: IAMAuth needs CacheName and UserID")
	case a.Config.Region == "":
		return "", aws.Credentials{}, errors.New("valkeystore: IAMAuth: the aws.Config has no region")
	case a.Config.Credentials == nil:
		return "", aws.Credentials{}, errors.New("valkeystore: IAMAuth: the aws.Config has no credentials")
	}
	// Bounded: the client calls this while it connects.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	creds, err := a.Config.Credentials.Retrieve(ctx)
	if err != nil {
		return "", aws.Credentials{}, fmt.Errorf("valkeystore: IAMAuth: retrieving credentials: %w", err)
	}
	q := url.Values{"Action": {"connect"}, "User": {a.UserID}}
	if a.Serverless {
		q.Set("ResourceType", "ServerlessCache")
	}
	q.Set("X-Amz-Expires", fmt.Sprint(int(iamTokenValidity/time.Second)))
	req, err := http.NewRequest(http.MethodGet, (&url.URL{Scheme: "http", Host: a.CacheName, Path: "/", RawQuery: q.Encode()}).String(), nil)
	if err != nil {
		return "", aws.Credentials{}, fmt.Errorf("valkeystore: IAMAuth: %w", err)
	}
	signed, _, err := v4.NewSigner().PresignHTTP(ctx, creds, req, emptyPayloadHash, "elasticache", a.Config.Region, now)
	if err != nil {
		return "", aws.Credentials{}, fmt.Errorf("valkeystore: IAMAuth: signing: %w", err)
	}
	// The token is the presigned URL without its scheme.
	return strings.TrimPrefix(signed, "http://"), creds, nil
}
