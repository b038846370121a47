package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

// Stack is the local world the functions run against: moto_server behind a
// metering proxy, and the sandbox payment gateway, all on loopback.
type Stack struct {
	Moto    *motoserver.Server
	Proxy   *Proxy
	Meter   *Meter
	Gateway *gateway.Gateway
	// GatewayURL is the gateway's base URL.
	GatewayURL string
	// GatewayConns counts the connections clients open to the gateway.
	GatewayConns ConnCounter
	// DB talks to moto through the proxy.
	DB *dynamodb.Client

	gwSrv       *http.Server
	motoVersion string
}

// StartStack starts moto_server (through motoserver.Start, so patched as
// every local run is, unless the environment says LAMBDAKIT_MOTO_PATCH=0),
// the proxy and the gateway. Close stops them.
func StartStack() (*Stack, error) {
	s := &Stack{Meter: NewMeter(), Gateway: &gateway.Gateway{}}
	var err error
	if s.Moto, err = motoserver.Start(); err != nil {
		return nil, err
	}
	// Read now: moto's request log soon pushes the line out of its tail.
	s.motoVersion = "moto (no launcher line in its output)"
	for line := range strings.Lines(s.Moto.Output()) {
		if rest, ok := strings.CutPrefix(line, "lambdakit-moto: "); ok {
			s.motoVersion = strings.TrimSpace(rest)
			break
		}
	}
	if s.Proxy, err = NewProxy(s.Moto.URL, s.Meter); err != nil {
		s.Close()
		return nil, err
	}
	cfg := s.Moto.AWSConfig()
	cfg.BaseEndpoint = aws.String(s.Proxy.URL)
	// A connection per request, closed after it: the harness's own
	// requests leave no connection open to count with the function's.
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.DisableKeepAlives = true
	})
	s.DB = dynamodb.NewFromConfig(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("bench: gateway: %w", err)
	}
	s.gwSrv = &http.Server{Handler: s.Gateway, ReadHeaderTimeout: 5 * time.Second, ConnState: s.GatewayConns.Track}
	go s.gwSrv.Serve(ln)
	s.GatewayURL = "http://" + ln.Addr().String()
	return s, nil
}

// MotoVersion describes the moto that runs, from the launcher's own line:
// "moto 5.2.1 patched: ..." or the line saying it runs plain moto.
func (s *Stack) MotoVersion() string { return s.motoVersion }

// Tables creates the payments table as template.yaml declares it, named
// prefix-payments, where the payment function and the bare floor keep
// their records on the ledger rows, through the proxy, so that the meter
// learns its keys.
func (s *Stack) Tables(ctx context.Context, template, prefix string) (payments string, err error) {
	tables, err := samtemplate.Tables(template)
	if err != nil {
		return "", err
	}
	payments = prefix + "-payments"
	t, err := samtemplate.Find(tables, "PaymentsTable")
	if err != nil {
		return "", err
	}
	if err := t.Create(ctx, s.DB, payments); err != nil {
		return "", err
	}
	return payments, nil
}

// OutboxTable creates an outbox table (dynamostore/outbox's keys, a stream
// of new images) named name.
func (s *Stack) OutboxTable(ctx context.Context, name string) error {
	_, err := s.DB.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(name),
		KeySchema: []dbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: dbtypes.KeyTypeHash},
			{AttributeName: aws.String("id"), KeyType: dbtypes.KeyTypeRange}},
		AttributeDefinitions: []dbtypes.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: dbtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String("id"), AttributeType: dbtypes.ScalarAttributeTypeS}},
		BillingMode:         dbtypes.BillingModePayPerRequest,
		StreamSpecification: &dbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: dbtypes.StreamViewTypeNewImage},
	})
	return err
}

// FunctionEnv is the environment of a payment function (or the bare floor)
// on this stack, DynamoDB through the proxy.
func (s *Stack) FunctionEnv(payments string) []string {
	return append(motoserver.Env(s.Proxy.URL),
		"PAYMENTS_TABLE="+payments,
		"PAYMENT_GATEWAY_URL="+s.GatewayURL,
	)
}

// Close stops the gateway, the proxy and moto.
func (s *Stack) Close() error {
	var errs []error
	if s.gwSrv != nil {
		errs = append(errs, s.gwSrv.Close())
	}
	if s.Proxy != nil {
		errs = append(errs, s.Proxy.Close())
	}
	s.Moto.Stop()
	return errors.Join(errs...)
}
