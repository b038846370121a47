package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/internal/gateway"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

const localUsage = `Usage: lambdakit local [flags]

Starts what the payment function needs on this machine and keeps it running
until Ctrl-C: moto_server (DynamoDB) on 127.0.0.1:MOTO_PORT, the sandbox
payment gateway on 127.0.0.1:GATEWAY_PORT, and the two tables created as
template.yaml declares them (lambdakit-idempotency, lambdakit-payments).
The default ports are the ones events/env.json points 'sam local invoke' at.
It prints the environment that points a function at them, for
'lambdakit invoke -env-file'.

Flags:
`

// Physical table names for the template's logical IDs, as in events/env.json.
var localTables = map[string]string{
	"IdempotencyTable": "lambdakit-idempotency",
	"PaymentsTable":    "lambdakit-payments",
}

func runLocal(ctx context.Context, std stdio, args []string) int {
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	fs.SetOutput(std.stderr)
	fs.Usage = func() { fmt.Fprint(std.stderr, localUsage); fs.PrintDefaults() }
	motoPort := fs.Int("moto-port", 5000, "moto_server's port")
	gatewayPort := fs.Int("gateway-port", 8080, "the sandbox gateway's port")
	template := fs.String("template", "template.yaml", "the SAM template whose tables to create")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(std.stderr, "lambdakit local: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	l, err := startLocal(ctx, *template, *motoPort, *gatewayPort)
	defer l.stop()
	if err != nil {
		fmt.Fprintf(std.stderr, "lambdakit local: %v\n", err)
		return exitCannotRun
	}
	fmt.Fprintf(std.stdout, "moto_server (DynamoDB) on %s, sandbox gateway on %s\n", l.moto.URL, l.gatewayURL)
	fmt.Fprintln(std.stdout, "environment for the function:")
	fmt.Fprintln(std.stdout, `{"PaymentFunction": {`)
	env := l.functionEnv()
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		sep := ","
		if i == len(env)-1 {
			sep = ""
		}
		fmt.Fprintf(std.stdout, "  %s: %s%s\n", strconv.Quote(k), strconv.Quote(v), sep)
	}
	fmt.Fprintln(std.stdout, "}}\nCtrl-C stops everything.")
	<-ctx.Done()
	return exitOK
}

// local is moto_server, the sandbox gateway and the tables: the outside
// world of the payment function, on loopback.
type local struct {
	moto       *motoserver.Server
	db         *dynamodb.Client
	gw         *gateway.Gateway
	gwSrv      *http.Server
	gatewayURL string
}

// startLocal starts it all; port 0 picks a free port. On error, what was
// started is stopped by stop, which the caller must call either way.
func startLocal(ctx context.Context, template string, motoPort, gatewayPort int) (*local, error) {
	l := &local{}
	tables, err := samtemplate.Tables(template)
	if err != nil {
		return l, err
	}
	if motoPort == 0 {
		l.moto, err = motoserver.Start()
	} else {
		l.moto, err = motoserver.StartOn(motoPort)
	}
	if err != nil {
		return l, err
	}
	l.db = dynamodb.NewFromConfig(l.moto.AWSConfig())
	for _, logical := range []string{"IdempotencyTable", "PaymentsTable"} {
		t, err := samtemplate.Find(tables, logical)
		if err != nil {
			return l, err
		}
		if err := t.Create(ctx, l.db, localTables[logical]); err != nil {
			return l, err
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(gatewayPort)))
	if err != nil {
		return l, fmt.Errorf("sandbox gateway: %w", err)
	}
	l.gw = &gateway.Gateway{}
	l.gwSrv = &http.Server{Handler: l.gw, ReadHeaderTimeout: 5 * time.Second}
	go l.gwSrv.Serve(ln)
	l.gatewayURL = "http://" + ln.Addr().String()
	return l, nil
}

// functionEnv points the payment function at the local world, with static
// test credentials and no instance metadata lookups.
func (l *local) functionEnv() []string {
	return append(motoserver.Env(l.moto.URL),
		"IDEMPOTENCY_TABLE="+localTables["IdempotencyTable"],
		"PAYMENTS_TABLE="+localTables["PaymentsTable"],
		"PAYMENT_GATEWAY_URL="+l.gatewayURL,
	)
}

func (l *local) stop() {
	if l == nil {
		return
	}
	if l.gwSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.gwSrv.Shutdown(ctx)
		cancel()
	}
	l.moto.Stop()
}
