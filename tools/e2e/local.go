package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/tools/internal/e2egw"
)

// The local stack plays a crash in seconds rather than minutes: the
// payment function's timeout, and so the lease of a payment in flight,
// is localTimeout, and the payment queue's visibility timeout
// localVisibility (the function's QUEUE_VISIBILITY_TIMEOUT with it). In
// AWS they stay the template's, 60 s and 360 s.
const (
	localTimeout    = 10
	localVisibility = 15
)

// setLocal points the story at the local AWS at endpoint ("": not known
// yet), with static test credentials: the SDK would otherwise look for
// instance metadata.
func (t *target) setLocal(endpoint string) {
	if t.wait == 0 {
		t.wait = 90 * time.Second
	}
	t.cfg = motoserver.Config(endpoint)
	t.env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") }), motoserver.Env(endpoint)...)
}

// playLocal brings up the stack on this machine, plays the story at its
// endpoint, and stops it all.
func (t *target) playLocal(ctx context.Context, template string) error {
	moto, err := motoserver.Start()
	if err != nil {
		return fmt.Errorf("moto_server: %w", err)
	}
	defer moto.Stop()
	t.setLocal(moto.URL)

	gw := &e2egw.Handler{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	t.gateway = "http://" + ln.Addr().String()

	t.say("local stack %s at %s, gateway %s", t.stackName, moto.URL, t.gateway)
	// The template's gateway parameter must be https: a URL that never
	// resolves stands in, and up's env file gives the functions the
	// real one, as make up does.
	if err := t.lambdakit(ctx, 5*time.Minute, "deploy-local", "-endpoint", moto.URL, "-stack-name", t.stackName,
		"-template", template, "-parameter-overrides", "PaymentGatewayUrl=https://gateway.invalid"); err != nil {
		return err
	}
	s, err := t.readStack(ctx)
	if err != nil {
		return err
	}
	if err := t.dress(ctx, s); err != nil {
		return err
	}
	_, _, crash := t.ids()
	// up starts the functions with the environment they have now: a
	// change of the deployed environment (the story's switch) would not
	// reach them, so the switch is in up's env file from the start too.
	// (Every function has a section: run refuses a file with sections
	// that lacks the function's own.)
	envFile := filepath.Join(t.dir, "up-env.json")
	env, _ := json.Marshal(map[string]map[string]string{
		"Parameters":      {"PAYMENT_GATEWAY_URL": t.gateway},
		"PaymentFunction": {"QUEUE_VISIBILITY_TIMEOUT": fmt.Sprint(localVisibility), crashSwitch: s.function + ":" + crash},
		"RelayFunction":   {},
		"LedgerFunction":  {},
	})
	if err := os.WriteFile(envFile, env, 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(t.dir, "up.log")
	stop, err := t.startUp(ctx, moto.URL, template, envFile, logPath)
	if err != nil {
		return err
	}
	err = t.play(ctx)
	if uerr := stop(); err == nil {
		err = uerr
	}
	if err != nil {
		if b, rerr := os.ReadFile(logPath); rerr == nil {
			t.say("--- lambdakit up's output:\n%s", b)
		}
	}
	return err
}

// dress shortens the payment function's timeout and its queue's
// visibility timeout (localTimeout, localVisibility).
func (t *target) dress(ctx context.Context, s stack) error {
	if _, err := lambda.NewFromConfig(t.cfg).UpdateFunctionConfiguration(ctx, &lambda.UpdateFunctionConfigurationInput{
		FunctionName: aws.String(s.function), Timeout: aws.Int32(localTimeout)}); err != nil {
		return fmt.Errorf("the function's timeout: %w", err)
	}
	_, err := sqs.NewFromConfig(t.cfg).SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(s.queue),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameVisibilityTimeout): fmt.Sprint(localVisibility)}})
	if err != nil {
		return fmt.Errorf("the queue's visibility timeout: %w", err)
	}
	return nil
}

// lambdakit runs the CLI to its end, for limit at most.
func (t *target) lambdakit(ctx context.Context, limit time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.cli, args...)
	cmd.Env = t.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("lambdakit %s: %w\n%s", args[0], err, out)
	}
	return nil
}

// startUp starts lambdakit up, its output into logPath, and waits until
// it runs every mapping. stop interrupts it as Ctrl-C would and waits for
// it to end.
func (t *target) startUp(ctx context.Context, endpoint, template, envFile, logPath string) (stop func() error, err error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	up := exec.Command(t.cli, "up", "-endpoint", endpoint, "-stack-name", t.stackName, "-template", template, "-env-file", envFile, "-status", "5s")
	up.Env, up.Stdout, up.Stderr = t.env, log, log
	if err := up.Start(); err != nil {
		log.Close()
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- up.Wait(); log.Close() }()
	stop = func() error {
		_ = up.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("lambdakit up after Ctrl-C: %w", err)
			}
			return nil
		case <-time.After(45 * time.Second): // a long poll in flight (20 s) ends first
			_ = up.Process.Kill()
			<-exited
			return errors.New("lambdakit up still ran 45 s after Ctrl-C: killed")
		}
	}
	// up builds the three functions for this machine first.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), "Running 3 mappings") {
			t.say("lambdakit up runs the stack's 3 mappings")
			return stop, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("lambdakit up stopped (%v):\n%s", err, b)
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("lambdakit up did not run the mappings within 3 minutes:\n%s", b)
		}
	}
}
