package runtimeapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// A Server serves whatever runtime talks to it; here the runtime is a
// goroutine that upper-cases its event.
func ExampleServer() {
	s, err := runtimeapi.New(func(o *runtimeapi.Options) { o.Timeout = 5 * time.Second })
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	go func() {
		api := "http://" + s.Addr() + "/2018-06-01/runtime/invocation/"
		resp, err := http.Get(api + "next")
		if err != nil {
			return
		}
		event, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := resp.Header.Get("Lambda-Runtime-Aws-Request-Id")
		resp, err = http.Post(api+id+"/response", "application/json", bytes.NewReader(bytes.ToUpper(event)))
		if err == nil {
			resp.Body.Close()
		}
	}()

	res, err := s.Invoke(context.Background(), []byte(`"hello"`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Outcome, string(res.Payload))
	// Output: success "HELLO"
}

// A Runner runs a bootstrap binary and keeps it warm across events.
func ExampleRunner() {
	r, err := runtimeapi.NewRunner("functions/payment/bootstrap", func(o *runtimeapi.RunnerOptions) {
		o.FunctionName = "payment"
		o.Timeout = 30 * time.Second
		o.Env = os.Environ() // credentials, AWS_ENDPOINT_URL ...
		o.Stdout, o.Stderr = os.Stderr, os.Stderr
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()

	res, err := r.Invoke(context.Background(), []byte(`{"Records": []}`))
	switch {
	case err != nil:
		fmt.Println("could not invoke:", err)
	case res.Outcome != runtimeapi.OutcomeSuccess:
		fmt.Println(res.Outcome, res.Error)
	default:
		fmt.Println(string(res.Payload))
	}
}
