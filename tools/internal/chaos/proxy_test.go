package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/tools/internal/chaos"
)

var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// proxyFixture is a table on the shared moto_server, a Proxy in front of
// it, and clients for both.
type proxyFixture struct {
	table  string
	direct *dynamodb.Client // straight to moto, for checking
	proxy  *chaos.Proxy
}

func newProxyFixture(t *testing.T, faults chaos.DynamoFaults) *proxyFixture {
	t.Helper()
	srv := moto.Server(t)
	f := &proxyFixture{table: testenv.Name(t), direct: dynamodb.NewFromConfig(moto.Config(t))}
	_, err := f.direct.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(f.table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	f.proxy, err = chaos.NewProxy(srv.URL, chaos.NewGate(true), faults, 1)
	if err != nil {
		t.Fatalf("NewProxy: %v", err)
	}
	t.Cleanup(func() { f.proxy.Close() })
	return f
}

// client talks to the proxy through the real SDK, with the given number
// of attempts per request (1: no retries, so that each fault shows).
func (f *proxyFixture) client(t *testing.T, attempts int) *dynamodb.Client {
	cfg := moto.Config(t)
	cfg.BaseEndpoint = aws.String(f.proxy.URL())
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = attempts
			o.MaxBackoff = 10 * time.Millisecond
		})
	}
	return dynamodb.NewFromConfig(cfg)
}

func (f *proxyFixture) exists(t *testing.T, id string) bool {
	t.Helper()
	out, err := f.direct.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.table), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem %s: %v", id, err)
	}
	return out.Item != nil
}

func (f *proxyFixture) put(c *dynamodb.Client, id string) error {
	_, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName:           aws.String(f.table),
		Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	return err
}

// Each fault, on every request, seen through the real SDK: the error the
// SDK makes of it, whether its own retryer would retry it or count it as
// throttling, and whether the write reached moto.
func TestProxyFaults(t *testing.T) {
	tests := []struct {
		fault     chaos.Fault
		faults    chaos.DynamoFaults
		wantErr   bool
		throttle  bool
		wantWrite bool
	}{
		{chaos.FaultServerError, chaos.DynamoFaults{ServerError: 1}, true, false, false},
		{chaos.FaultThrottle, chaos.DynamoFaults{Throttle: 1}, true, true, false},
		{chaos.FaultReset, chaos.DynamoFaults{Reset: 1}, true, false, false},
		{chaos.FaultDelay, chaos.DynamoFaults{Delay: 1, MaxDelay: 20 * time.Millisecond}, false, false, true},
		{chaos.FaultLostError, chaos.DynamoFaults{LostError: 1}, true, false, true},
		{chaos.FaultLostReset, chaos.DynamoFaults{LostReset: 1}, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			f := newProxyFixture(t, tt.faults)
			err := f.put(f.client(t, 1), "k")
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("PutItem error = %v; want an error: %v", err, tt.wantErr)
			}
			if err != nil {
				if got := retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err); got != aws.TrueTernary {
					t.Errorf("SDK retryable(%v) = %v; want true", err, got)
				}
				if got := retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary; got != tt.throttle {
					t.Errorf("SDK throttle(%v) = %v; want %v", err, got, tt.throttle)
				}
			}
			if tt.throttle {
				var pte *types.ProvisionedThroughputExceededException
				if !errors.As(err, &pte) {
					t.Errorf("error %T %v; want a *types.ProvisionedThroughputExceededException", err, err)
				}
			}
			if got := f.exists(t, "k"); got != tt.wantWrite {
				t.Errorf("item written = %v; want %v", got, tt.wantWrite)
			}
			if got := f.proxy.Injected()[tt.fault]; got != 1 {
				t.Errorf("Injected()[%v] = %d; want 1", tt.fault, got)
			}
		})
	}
}

// Without faults the proxy is transparent, errors included: a failed
// condition arrives as the SDK's typed exception with the old item.
func TestProxyForwards(t *testing.T) {
	f := newProxyFixture(t, chaos.DynamoFaults{})
	c := f.client(t, 1)
	if err := f.put(c, "k"); err != nil {
		t.Fatalf("first PutItem: %v", err)
	}
	_, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName:                           aws.String(f.table),
		Item:                                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "k"}},
		ConditionExpression:                 aws.String("attribute_not_exists(id)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) || ccf.Item["id"] == nil {
		t.Errorf("second PutItem error = %v; want ConditionalCheckFailedException with the old item", err)
	}
	if n := len(f.proxy.Injected()); n != 0 {
		t.Errorf("Injected() = %v; want none", f.proxy.Injected())
	}
}

// The kill hook sees the operation and strikes before the request reaches
// moto or after moto applied it.
func TestProxyKill(t *testing.T) {
	f := newProxyFixture(t, chaos.DynamoFaults{})
	var before, after atomic.Int32
	f.proxy.SetKill(func(op string) chaos.KillPoint {
		switch op {
		case "PutItem":
			return chaos.KillPoint{Before: true}
		case "DeleteItem":
			return chaos.KillPoint{After: true}
		}
		return chaos.KillPoint{}
	}, func(k chaos.KillPoint) {
		if k.Before {
			before.Add(1)
		} else {
			after.Add(1)
		}
	})
	c := f.client(t, 1)
	if err := f.put(c, "k"); err == nil {
		t.Error("PutItem killed before moto: got no error")
	}
	if f.exists(t, "k") {
		t.Error("PutItem killed before moto reached it")
	}
	if _, err := f.direct.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table),
		Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "d"}}}); err != nil {
		t.Fatalf("direct PutItem: %v", err)
	}
	_, err := c.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(f.table),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "d"}}})
	if err == nil {
		t.Error("DeleteItem killed after moto: got no error")
	}
	if f.exists(t, "d") {
		t.Error("DeleteItem killed after moto: item still there; want it applied")
	}
	if before.Load() != 1 || after.Load() != 1 || f.proxy.Killed() != 2 {
		t.Errorf("kills before %d, after %d, Killed() %d; want 1, 1, 2", before.Load(), after.Load(), f.proxy.Killed())
	}
}

// The Gate lets one request at a time reach the server behind it, answer
// read in full, and without it requests overlap: the server here counts
// how many it is serving at once.
func TestGateOneAtATime(t *testing.T) {
	for _, serial := range []bool{true, false} {
		t.Run("serial="+strconv.FormatBool(serial), func(t *testing.T) {
			var now, most atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := now.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(5 * time.Millisecond)
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				// The body is still coming: the Gate must wait for it.
				time.Sleep(5 * time.Millisecond)
				now.Add(-1)
				io.WriteString(w, "done")
			}))
			defer srv.Close()
			gate := chaos.NewGate(serial)
			const clients = 8
			errc := make(chan error, clients)
			for range clients {
				go func() {
					for range 5 {
						req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
						resp, err := gate.RoundTrip(req)
						if err != nil {
							errc <- err
							return
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if string(b) != "done" {
							errc <- fmt.Errorf("body %q; want done", b)
							return
						}
					}
					errc <- nil
				}()
			}
			for range clients {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			if got := gate.Requests(); got != clients*5 {
				t.Errorf("Requests() = %d; want %d", got, clients*5)
			}
			switch m := most.Load(); {
			case serial && m != 1:
				t.Errorf("at most %d requests at once through a serial Gate; want 1", m)
			case !serial && m < 2:
				t.Errorf("at most %d requests at once through a concurrent Gate; want several", m)
			}
		})
	}
}
