package runtimeapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// These tests play the runtime by hand over HTTP, the way a bootstrap does,
// so that each endpoint's answer can be checked directly.

var client = &http.Client{Timeout: 10 * time.Second}

func newServer(t testing.TB, optFns ...func(*runtimeapi.Options)) *runtimeapi.Server {
	t.Helper()
	s, err := runtimeapi.New(optFns...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type invokeResult struct {
	res runtimeapi.Result
	err error
}

// invokeAsync starts s.Invoke and returns a channel for its result.
func invokeAsync(ctx context.Context, s *runtimeapi.Server, event string, optFns ...func(*runtimeapi.InvokeOptions)) <-chan invokeResult {
	ch := make(chan invokeResult, 1)
	go func() {
		res, err := s.Invoke(ctx, []byte(event), optFns...)
		ch <- invokeResult{res, err}
	}()
	return ch
}

func await(t testing.TB, ch <-chan invokeResult) invokeResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Invoke did not return within 10s")
		return invokeResult{}
	}
}

func url(s *runtimeapi.Server, path string) string {
	return "http://" + s.Addr() + "/2018-06-01/runtime/" + path
}

// next takes the next event as a runtime would.
func next(t testing.TB, s *runtimeapi.Server) (http.Header, string) {
	t.Helper()
	resp, err := client.Get(url(s, "invocation/next"))
	if err != nil {
		t.Fatalf("GET next: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET next: status %d; want 200", resp.StatusCode)
	}
	return resp.Header, string(body)
}

// post posts body and returns the status and the answer.
func post(t testing.TB, s *runtimeapi.Server, path, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url(s, path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerResponse(t *testing.T) {
	s := newServer(t, func(o *runtimeapi.Options) {
		o.FunctionName = "payment"
		o.Region = "eu-west-1"
		o.Timeout = 30 * time.Second
	})
	ch := invokeAsync(context.Background(), s, `{"hello":"world"}`)
	start := time.Now()
	hdr, body := next(t, s)
	if body != `{"hello":"world"}` {
		t.Errorf("event body = %q; want the event", body)
	}
	id := hdr.Get("Lambda-Runtime-Aws-Request-Id")
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Errorf("request ID = %q; want a UUID", id)
	}
	ms, err := strconv.ParseInt(hdr.Get("Lambda-Runtime-Deadline-Ms"), 10, 64)
	if err != nil {
		t.Fatalf("deadline header %q: %v", hdr.Get("Lambda-Runtime-Deadline-Ms"), err)
	}
	if d := time.UnixMilli(ms).Sub(start); d < 29*time.Second || d > 31*time.Second {
		t.Errorf("deadline = now + %v; want now + 30s", d)
	}
	if got, want := hdr.Get("Lambda-Runtime-Invoked-Function-Arn"), "arn:aws:lambda:eu-west-1:123456789012:function:payment"; got != want {
		t.Errorf("function ARN = %q; want %q", got, want)
	}
	if got := hdr.Get("Lambda-Runtime-Trace-Id"); !regexp.MustCompile(`^Root=1-[0-9a-f]{8}-[0-9a-f]{24};Parent=[0-9a-f]{16};Sampled=0$`).MatchString(got) {
		t.Errorf("trace ID = %q; want an X-Ray trace header", got)
	}
	for _, h := range []string{"Lambda-Runtime-Client-Context", "Lambda-Runtime-Cognito-Identity"} {
		if _, ok := hdr[h]; ok {
			t.Errorf("header %s is present; want it absent when not set", h)
		}
	}

	code, answer := post(t, s, "invocation/"+id+"/response", `{"ok":true}`, nil)
	if code != http.StatusAccepted {
		t.Errorf("POST response: status %d (%s); want 202", code, answer)
	}
	r := await(t, ch)
	if r.err != nil {
		t.Fatalf("Invoke: %v", r.err)
	}
	if r.res.Outcome != runtimeapi.OutcomeSuccess || string(r.res.Payload) != `{"ok":true}` || r.res.Error != nil {
		t.Errorf("Invoke = %v %q %v; want success {\"ok\":true}", r.res.Outcome, r.res.Payload, r.res.Error)
	}
	if r.res.RequestID != id {
		t.Errorf("RequestID = %q; want %q", r.res.RequestID, id)
	}

	t.Run("a second answer is refused", func(t *testing.T) {
		code, answer := post(t, s, "invocation/"+id+"/response", `{}`, nil)
		if code != http.StatusBadRequest || !strings.Contains(answer, `"errorType":"InvalidRequestID"`) {
			t.Errorf("second POST response: %d %s; want 400 InvalidRequestID", code, answer)
		}
	})
}

func TestServerInvokeOptions(t *testing.T) {
	s := newServer(t)
	ch := invokeAsync(context.Background(), s, `{}`, func(o *runtimeapi.InvokeOptions) {
		o.ClientContext = `{"custom":{"a":"b"}}`
		o.CognitoIdentity = `{"cognitoIdentityId":"id"}`
		o.TraceID = "Root=1-00000000-000000000000000000000000;Sampled=1"
	})
	hdr, _ := next(t, s)
	for h, want := range map[string]string{
		"Lambda-Runtime-Client-Context":   `{"custom":{"a":"b"}}`,
		"Lambda-Runtime-Cognito-Identity": `{"cognitoIdentityId":"id"}`,
		"Lambda-Runtime-Trace-Id":         "Root=1-00000000-000000000000000000000000;Sampled=1",
	} {
		if got := hdr.Get(h); got != want {
			t.Errorf("%s = %q; want %q", h, got, want)
		}
	}
	post(t, s, "invocation/"+hdr.Get("Lambda-Runtime-Aws-Request-Id")+"/response", `null`, nil)
	await(t, ch)
}

func TestServerFunctionError(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		header   string
		wantType string
		wantMsg  string
	}{
		{"error document", `{"errorMessage":"card declined","errorType":"PaymentDeclined","stackTrace":[{"path":"main.go","line":3,"label":"handle"}]}`, "", "PaymentDeclined", "card declined"},
		{"type from the header when the body has none", `{"errorMessage":"card declined"}`, "Custom.Type", "Custom.Type", "card declined"},
		{"body that is no document kept as the message", `it broke`, "", "Unhandled", "it broke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t)
			ch := invokeAsync(context.Background(), s, `{}`)
			hdr, _ := next(t, s)
			var h map[string]string
			if tt.header != "" {
				h = map[string]string{"Lambda-Runtime-Function-Error-Type": tt.header}
			}
			code, answer := post(t, s, "invocation/"+hdr.Get("Lambda-Runtime-Aws-Request-Id")+"/error", tt.body, h)
			if code != http.StatusAccepted {
				t.Errorf("POST error: %d %s; want 202", code, answer)
			}
			r := await(t, ch)
			if r.err != nil || r.res.Outcome != runtimeapi.OutcomeFunctionError {
				t.Fatalf("Invoke = %v, %v; want a function error", r.res.Outcome, r.err)
			}
			if r.res.Error.Type != tt.wantType || r.res.Error.Message != tt.wantMsg {
				t.Errorf("Error = %q %q; want %q %q", r.res.Error.Type, r.res.Error.Message, tt.wantType, tt.wantMsg)
			}
			if string(r.res.Payload) != tt.body {
				t.Errorf("Payload = %q; want the posted body %q", r.res.Payload, tt.body)
			}
		})
	}
}

func TestServerRefusals(t *testing.T) {
	s := newServer(t)
	tests := []struct {
		name     string
		method   string
		path     string
		wantCode int
		wantType string
	}{
		{"response for an unknown request ID", http.MethodPost, "invocation/nope/response", http.StatusBadRequest, "InvalidRequestID"},
		{"error for an unknown request ID", http.MethodPost, "invocation/nope/error", http.StatusBadRequest, "InvalidRequestID"},
		{"POST to next", http.MethodPost, "invocation/next", http.StatusMethodNotAllowed, ""},
		{"GET a response", http.MethodGet, "invocation/x/response", http.StatusMethodNotAllowed, ""},
		{"GET init error", http.MethodGet, "init/error", http.StatusMethodNotAllowed, ""},
		{"unknown path", http.MethodGet, "nothing", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, url(s, tt.path), strings.NewReader("{}"))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Errorf("status = %d; want %d", resp.StatusCode, tt.wantCode)
			}
			if tt.wantType == "" {
				return
			}
			var doc struct{ ErrorType, ErrorMessage string }
			if err := json.Unmarshal(body, &doc); err != nil || doc.ErrorType != tt.wantType || doc.ErrorMessage == "" {
				t.Errorf("body = %s; want an error document of type %s", body, tt.wantType)
			}
		})
	}
}

func TestServerInitError(t *testing.T) {
	s := newServer(t)
	ch := invokeAsync(context.Background(), s, `{}`)
	doc := `{"errorType":"Runtime.ImportModuleError","errorMessage":"no module"}`
	if code, answer := post(t, s, "init/error", doc, nil); code != http.StatusAccepted {
		t.Fatalf("POST init/error: %d %s; want 202", code, answer)
	}
	for i, r := range []invokeResult{await(t, ch), await(t, invokeAsync(context.Background(), s, `{}`))} {
		if r.err != nil || r.res.Outcome != runtimeapi.OutcomeInitError {
			t.Fatalf("Invoke %d = %v, %v; want an init error", i, r.res.Outcome, r.err)
		}
		if r.res.Error.Type != "Runtime.ImportModuleError" || r.res.Error.Message != "no module" || string(r.res.Payload) != doc {
			t.Errorf("Invoke %d = %+v %s; want the posted init error", i, r.res.Error, r.res.Payload)
		}
	}
	t.Run("a second init error is refused", func(t *testing.T) {
		if code, _ := post(t, s, "init/error", doc, nil); code != http.StatusForbidden {
			t.Errorf("second POST init/error: %d; want 403", code)
		}
	})
}

func TestServerInitErrorAfterInit(t *testing.T) {
	s := newServer(t)
	ch := invokeAsync(context.Background(), s, `{}`)
	hdr, _ := next(t, s)
	if code, _ := post(t, s, "init/error", `{}`, nil); code != http.StatusForbidden {
		t.Errorf("POST init/error after GET next: %d; want 403", code)
	}
	post(t, s, "invocation/"+hdr.Get("Lambda-Runtime-Aws-Request-Id")+"/response", `1`, nil)
	if r := await(t, ch); r.res.Outcome != runtimeapi.OutcomeSuccess {
		t.Errorf("Invoke = %v; want success", r.res.Outcome)
	}
}

func TestServerTimeout(t *testing.T) {
	s := newServer(t, func(o *runtimeapi.Options) { o.Timeout = 200 * time.Millisecond })

	t.Run("event taken, never answered", func(t *testing.T) {
		ch := invokeAsync(context.Background(), s, `{}`)
		hdr, _ := next(t, s)
		r := await(t, ch)
		if r.err != nil || r.res.Outcome != runtimeapi.OutcomeTimeout {
			t.Fatalf("Invoke = %v, %v; want a timeout", r.res.Outcome, r.err)
		}
		if r.res.Error.Type != "Sandbox.Timedout" || !strings.Contains(r.res.Error.Message, "Task timed out after 0.20 seconds") {
			t.Errorf("Error = %+v; want Sandbox.Timedout after 0.20 seconds", r.res.Error)
		}
		if code, _ := post(t, s, "invocation/"+hdr.Get("Lambda-Runtime-Aws-Request-Id")+"/response", `{}`, nil); code != http.StatusBadRequest {
			t.Errorf("late response: %d; want 400", code)
		}
	})
	t.Run("event never taken", func(t *testing.T) {
		r := await(t, invokeAsync(context.Background(), s, `{}`))
		if r.err != nil || r.res.Outcome != runtimeapi.OutcomeTimeout {
			t.Fatalf("Invoke = %v, %v; want a timeout", r.res.Outcome, r.err)
		}
	})
	t.Run("timed-out event is not handed out later", func(t *testing.T) {
		ch := invokeAsync(context.Background(), s, `"fresh"`)
		hdr, body := next(t, s)
		if body != `"fresh"` {
			t.Errorf("next event = %s; want the fresh one", body)
		}
		post(t, s, "invocation/"+hdr.Get("Lambda-Runtime-Aws-Request-Id")+"/response", `{}`, nil)
		await(t, ch)
	})
}

func TestServerContextAndClose(t *testing.T) {
	t.Run("ended context withdraws the event", func(t *testing.T) {
		s := newServer(t)
		ctx, cancel := context.WithCancel(context.Background())
		ch := invokeAsync(ctx, s, `"stale"`)
		time.Sleep(20 * time.Millisecond)
		cancel()
		if r := await(t, ch); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Invoke error = %v; want context.Canceled", r.err)
		}
		ch = invokeAsync(context.Background(), s, `"fresh"`)
		hdr, body := next(t, s)
		if body != `"fresh"` {
			t.Errorf("next event = %s; want the fresh one", body)
		}
		post(t, s, "invocation/"+hdr.Get("Lambda-Runtime-Aws-Request-Id")+"/response", `{}`, nil)
		await(t, ch)
	})
	t.Run("Close ends a waiting Invoke and later ones", func(t *testing.T) {
		s := newServer(t)
		ch := invokeAsync(context.Background(), s, `{}`)
		next(t, s)
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if r := await(t, ch); !errors.Is(r.err, runtimeapi.ErrClosed) {
			t.Errorf("Invoke error = %v; want ErrClosed", r.err)
		}
		if _, err := s.Invoke(context.Background(), []byte(`{}`)); !errors.Is(err, runtimeapi.ErrClosed) {
			t.Errorf("Invoke after Close: %v; want ErrClosed", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

func TestServerResponseTooLarge(t *testing.T) {
	s := newServer(t)
	ch := invokeAsync(context.Background(), s, `{}`)
	hdr, _ := next(t, s)
	big := `"` + strings.Repeat("x", 6291556) + `"`
	code, answer := post(t, s, "invocation/"+hdr.Get("Lambda-Runtime-Aws-Request-Id")+"/response", big, nil)
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("POST response of %d bytes: %d %s; want 413", len(big), code, answer)
	}
	r := await(t, ch)
	if r.res.Outcome != runtimeapi.OutcomeFunctionError || r.res.Error.Type != "Function.ResponseSizeTooLarge" {
		t.Errorf("Invoke = %v %+v; want Function.ResponseSizeTooLarge", r.res.Outcome, r.res.Error)
	}
}

func TestServerRequestIDsDistinct(t *testing.T) {
	s := newServer(t)
	seen := map[string]bool{}
	for range 20 {
		ch := invokeAsync(context.Background(), s, `{}`)
		hdr, _ := next(t, s)
		id := hdr.Get("Lambda-Runtime-Aws-Request-Id")
		if seen[id] {
			t.Fatalf("request ID %s handed out twice", id)
		}
		seen[id] = true
		post(t, s, "invocation/"+id+"/response", `{}`, nil)
		await(t, ch)
	}
}

func TestNewZeroOptionsMeanDefaults(t *testing.T) {
	s := newServer(t, func(o *runtimeapi.Options) { *o = runtimeapi.Options{} })
	got := s.Options()
	want := runtimeapi.Options{
		FunctionName: "function",
		FunctionARN:  "arn:aws:lambda:us-east-1:123456789012:function:function",
		Region:       "us-east-1",
		Timeout:      3 * time.Second,
		MemoryMB:     128,
		Handler:      "bootstrap",
		Addr:         "127.0.0.1:0",
	}
	if got != want {
		t.Errorf("Options() = %+v; want %+v", got, want)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":0") {
		t.Errorf("Addr() = %q; want 127.0.0.1 and a real port", s.Addr())
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := map[string]func(*runtimeapi.Options){
		"negative timeout": func(o *runtimeapi.Options) { o.Timeout = -1 },
		"negative memory":  func(o *runtimeapi.Options) { o.MemoryMB = -5 },
		"unusable address": func(o *runtimeapi.Options) { o.Addr = "256.0.0.1:0" },
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			if s, err := runtimeapi.New(fn); err == nil {
				s.Close()
				t.Error("New succeeded; want an error")
			}
		})
	}
}
