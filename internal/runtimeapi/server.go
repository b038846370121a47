package runtimeapi

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Names from the Runtime API documentation, and from aws-lambda-go, which is
// the client every Go bootstrap uses.
const (
	headerRequestID       = "Lambda-Runtime-Aws-Request-Id"
	headerDeadline        = "Lambda-Runtime-Deadline-Ms"
	headerFunctionARN     = "Lambda-Runtime-Invoked-Function-Arn"
	headerTraceID         = "Lambda-Runtime-Trace-Id"
	headerClientContext   = "Lambda-Runtime-Client-Context"
	headerCognitoIdentity = "Lambda-Runtime-Cognito-Identity"
	headerErrorType       = "Lambda-Runtime-Function-Error-Type"
	trailerErrorBody      = "Lambda-Runtime-Function-Error-Body"
	headerExtensionName   = "Lambda-Extension-Name"
	headerExtensionID     = "Lambda-Extension-Identifier"

	// maxResponseBytes is Lambda's limit on a buffered response, and on the
	// error documents, 6 MB as Lambda counts it.
	maxResponseBytes = 6291556
)

// Options configures a Server. The zero value of each field means its
// default; New fills the defaults in before applying the option functions.
type Options struct {
	// FunctionName is what the function sees in AWS_LAMBDA_FUNCTION_NAME
	// and in its ARN. Default "function".
	FunctionName string
	// FunctionARN is sent in Lambda-Runtime-Invoked-Function-Arn. Default
	// an unqualified ARN for FunctionName in Region, account 123456789012,
	// moto's account, which the local queues' ARNs name too. (sam local's
	// emulator, aws-lambda-rie, always sends us-east-1 and 012345678912.)
	FunctionARN string
	// Region is the AWS region the function believes it runs in. Default
	// "us-east-1".
	Region string
	// Timeout is the function's timeout: each event's deadline is the time
	// it was queued plus Timeout. Default 3s, Lambda's default.
	Timeout time.Duration
	// MemoryMB is the configured memory, which the function sees in
	// AWS_LAMBDA_FUNCTION_MEMORY_SIZE. Nothing enforces it. Default 128.
	MemoryMB int
	// Handler is the function's handler setting (_HANDLER). Default
	// "bootstrap", what provided.al2023 functions use.
	Handler string
	// Addr is the listen address. Default "127.0.0.1:0": loopback, a free
	// port, so that nothing outside the machine can post results.
	Addr string
}

// defaultOptions returns the defaults; they match a function created with
// no settings, apart from the name.
func defaultOptions() Options {
	return Options{
		FunctionName: "function",
		Region:       "us-east-1",
		Timeout:      3 * time.Second,
		MemoryMB:     128,
		Handler:      "bootstrap",
		Addr:         "127.0.0.1:0",
	}
}

// finish fills in the defaults of fields an option function set to zero,
// derives what depends on other fields, and checks the rest, so that a bad
// option fails New instead of confusing the function later.
func (o *Options) finish() error {
	d := defaultOptions()
	if o.FunctionName == "" {
		o.FunctionName = d.FunctionName
	}
	if o.Region == "" {
		o.Region = d.Region
	}
	if o.Timeout == 0 {
		o.Timeout = d.Timeout
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = d.MemoryMB
	}
	if o.Handler == "" {
		o.Handler = d.Handler
	}
	if o.Addr == "" {
		o.Addr = d.Addr
	}
	if o.Timeout < 0 {
		return fmt.Errorf("runtimeapi: timeout %v is negative", o.Timeout)
	}
	if o.MemoryMB < 0 {
		return fmt.Errorf("runtimeapi: memory %d MB is negative", o.MemoryMB)
	}
	if o.FunctionARN == "" {
		o.FunctionARN = DefaultFunctionARN(o.Region, o.FunctionName)
	}
	return nil
}

// DefaultFunctionARN is the ARN a function named name in region has when
// Options set none: account 123456789012, moto's. Callers that name the
// function to others (an event source mapping's invocation records) use it
// so that they name the ARN the function itself sees.
func DefaultFunctionARN(region, name string) string {
	return "arn:aws:lambda:" + region + ":123456789012:function:" + name
}

// InvokeOptions carries the optional parts of one invocation.
type InvokeOptions struct {
	// ClientContext is sent, if set, in Lambda-Runtime-Client-Context (a
	// JSON document, as mobile SDK callers send it).
	ClientContext string
	// CognitoIdentity is sent, if set, in Lambda-Runtime-Cognito-Identity.
	CognitoIdentity string
	// TraceID is sent in Lambda-Runtime-Trace-Id. Default a fresh X-Ray
	// trace header, not sampled.
	TraceID string
}

// Server serves the Lambda Runtime API on a loopback port. Use New to make
// one and Close to stop it.
type Server struct {
	opts      Options
	ln        net.Listener
	hs        *http.Server
	serveDone chan struct{}
	closing   chan struct{} // closed by Close
	shutdown  chan struct{} // closed when extensions are told to shut down

	mu           sync.Mutex
	changed      chan struct{} // closed and replaced on every change below
	closed       bool
	queue        []*invocation          // events no runtime has taken yet
	inflight     map[string]*invocation // events taken, not yet answered
	waiting      int                    // GET next requests blocked for an event
	initDone     bool                   // the runtime asked for an event: init is over
	initErr      []byte                 // the init error document, once posted
	initErrType  string
	extensions   map[string][]string // extension ID → events it registered for
	shutdownAtMs int64
	// freeze, if set, is called when the runtime waits for an event and
	// none is queued or in flight: Lambda freezes the environment then.
	freeze func()
}

// invocation is one event on its way through the Server.
type invocation struct {
	id       string
	event    []byte
	deadline time.Time
	opts     InvokeOptions
	started  time.Time     // when a runtime took it; zero while queued
	done     chan struct{} // closed once the invocation has ended, one way or another
	result   Result        // set before done is closed
}

// New starts a Runtime API server on a loopback port.
func New(optFns ...func(*Options)) (*Server, error) {
	o := defaultOptions()
	for _, fn := range optFns {
		fn(&o)
	}
	if err := o.finish(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("runtimeapi: listen: %w", err)
	}
	s := &Server{
		opts:       o,
		ln:         ln,
		serveDone:  make(chan struct{}),
		closing:    make(chan struct{}),
		shutdown:   make(chan struct{}),
		changed:    make(chan struct{}),
		inflight:   make(map[string]*invocation),
		extensions: make(map[string][]string),
	}
	mux := http.NewServeMux()
	// ServeMux answers 405 with an Allow header for a known path and the
	// wrong method, and 404 for anything else.
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", s.handleNext)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", s.handleResponse)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", s.handleError)
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", s.handleInitError)
	mux.HandleFunc("POST /2020-01-01/extension/register", s.handleExtensionRegister)
	mux.HandleFunc("GET /2020-01-01/extension/event/next", s.handleExtensionNext)
	// No read or write timeout: GET next is a long poll that lasts as long
	// as the function is idle.
	s.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.serveDone)
		_ = s.hs.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return s, nil
}

// Addr returns the server's host:port, the value of AWS_LAMBDA_RUNTIME_API
// for the runtime.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Options returns the options in force, defaults filled in.
func (s *Server) Options() Options { return s.opts }

// Close stops the server. Invocations still waiting end with ErrClosed; a
// runtime blocked in GET next sees its connection closed.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.broadcastLocked()
	s.mu.Unlock()
	err := s.hs.Close()
	<-s.serveDone
	return err
}

// Invoke queues event with a fresh request ID and a deadline of now plus
// the timeout, and waits for the runtime's response, its function error, an
// init error, or the deadline. Function failures are reported in the
// Result; the error is non-nil only when ctx ends or the Server closes
// first.
func (s *Server) Invoke(ctx context.Context, event []byte, optFns ...func(*InvokeOptions)) (Result, error) {
	return s.invoke(ctx, event, nil, optFns...)
}

// errAborted reports that the abort channel given to invoke fired.
var errAborted = errors.New("runtimeapi: invocation aborted")

// invoke is Invoke, plus abort: when it is closed before an answer comes,
// the invocation is withdrawn and invoke returns errAborted. A Runner passes
// the channel that closes when its process exits.
func (s *Server) invoke(ctx context.Context, event []byte, abort <-chan struct{}, optFns ...func(*InvokeOptions)) (Result, error) {
	var o InvokeOptions
	for _, fn := range optFns {
		fn(&o)
	}
	if o.TraceID == "" {
		o.TraceID = newTraceID()
	}
	inv := &invocation{
		id:       newRequestID(),
		event:    event,
		deadline: time.Now().Add(s.opts.Timeout),
		opts:     o,
		done:     make(chan struct{}),
	}

	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return Result{RequestID: inv.id}, ErrClosed
	case s.initErr != nil:
		// The runtime failed its init; it will never take the event.
		res := s.initFailureLocked(inv.id)
		s.mu.Unlock()
		return res, nil
	}
	s.queue = append(s.queue, inv)
	s.broadcastLocked()
	s.mu.Unlock()

	timer := time.NewTimer(time.Until(inv.deadline))
	defer timer.Stop()
	select {
	case <-inv.done:
		return inv.result, nil
	case <-timer.C:
		res := newFailure(inv.id, OutcomeTimeout, "Sandbox.Timedout", "Task timed out after %.2f seconds", s.opts.Timeout.Seconds())
		res.Duration = s.opts.Timeout
		return s.settle(inv, res), nil
	case <-ctx.Done():
		return s.withdraw(inv, ctx.Err())
	case <-abort:
		return s.withdraw(inv, errAborted)
	case <-s.closing:
		return s.withdraw(inv, ErrClosed)
	}
}

// settle ends inv with res, unless an answer ended it first; it returns the
// result that stands. Every ending goes through here, under the lock, so
// that a late answer and a deadline cannot both win.
func (s *Server) settle(inv *invocation, res Result) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked(inv, res)
	return inv.result
}

func (s *Server) settleLocked(inv *invocation, res Result) {
	select {
	case <-inv.done:
		return
	default:
	}
	if i := slices.Index(s.queue, inv); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
	}
	delete(s.inflight, inv.id)
	res.RequestID = inv.id
	res.deadline = inv.deadline
	if !inv.started.IsZero() && res.Duration == 0 {
		res.Duration = time.Since(inv.started)
	}
	inv.result = res
	close(inv.done)
	s.broadcastLocked()
}

// withdraw ends inv without an answer, because of err, so that the runtime
// can no longer take it or answer it. If an answer came first, it stands.
func (s *Server) withdraw(inv *invocation, err error) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-inv.done:
		return inv.result, nil
	default:
	}
	s.settleLocked(inv, Result{})
	res := Result{RequestID: inv.id, deadline: inv.deadline}
	if !inv.started.IsZero() {
		res.Duration = time.Since(inv.started)
	}
	return res, err
}

// broadcastLocked wakes everyone waiting for a change of state.
func (s *Server) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// state is a snapshot for a Runner waiting for the runtime: whether it is
// idle in GET next, the init error if one was posted, and a channel that
// closes on the next change.
func (s *Server) state() (idle bool, initErr bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting > 0 && len(s.inflight) == 0, s.initErr != nil, s.changed
}

// initFailure is the result of an invocation with request ID id on a
// runtime that posted an init error.
func (s *Server) initFailure(id string) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initFailureLocked(id)
}

// initFailureLocked is the result of an invocation on a runtime that posted
// an init error.
func (s *Server) initFailureLocked(id string) Result {
	fe := parseFunctionError(s.initErr, s.initErrType)
	return Result{RequestID: id, Outcome: OutcomeInitError, Payload: s.initErr, Error: fe}
}

// setFreeze sets the function that freezes the runtime while it is idle.
func (s *Server) setFreeze(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freeze = fn
}

// hasExtensions reports whether an extension registered, which is what makes
// Lambda send SIGTERM before SIGKILL at shutdown.
func (s *Server) hasExtensions() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.extensions) > 0
}

// shutdownExtensions sends SHUTDOWN to the extensions that asked for it, with
// deadline as the time they have.
func (s *Server) shutdownExtensions(deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shuttingDownLocked() {
		s.shutdownAtMs = deadline.UnixMilli()
		close(s.shutdown)
	}
}

// shuttingDownLocked reports whether extensions were told to shut down.
// The caller holds s.mu.
func (s *Server) shuttingDownLocked() bool {
	select {
	case <-s.shutdown:
		return true
	default:
		return false
	}
}

// handleNext hands the runtime the next event, waiting as long as it takes.
func (s *Server) handleNext(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.initDone = true
	s.waiting++
	if s.freeze != nil && !s.closed && !s.shuttingDownLocked() && len(s.queue) == 0 && len(s.inflight) == 0 {
		// Under the lock, so that whoever sees the runtime idle (state)
		// knows it is frozen, and thaws it before queuing an event. Not
		// once shutdown has begun: the environment stays thawed for its
		// SIGTERM, which a stopped process would not handle.
		s.freeze()
	}
	s.broadcastLocked()
	for s.closed || len(s.queue) == 0 {
		if s.closed {
			s.waiting--
			s.mu.Unlock()
			// 500 tells a runtime to exit: the environment is going away.
			writeError(w, http.StatusInternalServerError, "Runtime.Closed", "the runtime API server is closing")
			return
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-r.Context().Done():
			s.mu.Lock()
			s.waiting--
			s.broadcastLocked()
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
	}
	inv := s.queue[0]
	s.queue = s.queue[1:]
	s.waiting--
	inv.started = time.Now()
	s.inflight[inv.id] = inv
	s.broadcastLocked()
	s.mu.Unlock()

	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(headerRequestID, inv.id)
	h.Set(headerDeadline, strconv.FormatInt(inv.deadline.UnixMilli(), 10))
	h.Set(headerFunctionARN, s.opts.FunctionARN)
	h.Set(headerTraceID, inv.opts.TraceID)
	if inv.opts.ClientContext != "" {
		h.Set(headerClientContext, inv.opts.ClientContext)
	}
	if inv.opts.CognitoIdentity != "" {
		h.Set(headerCognitoIdentity, inv.opts.CognitoIdentity)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(inv.event) // a runtime that hung up finds out on its own; the deadline ends the invocation
}

// readBody reads a posted body up to Lambda's limit; tooLarge reports
// whether the body went past it. When the body cannot be read, readBody
// answers 400 itself and returns ok false.
func readBody(w http.ResponseWriter, r *http.Request) (body []byte, tooLarge, ok bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxResponseBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "InvalidRequest", "cannot read the body: "+err.Error())
		return nil, false, false
	}
	return body, len(body) > maxResponseBytes, true
}

// inflightLocked returns the invocation the request's path names, or
// answers 400 as Lambda does and returns nil. Callers hold s.mu.
func (s *Server) inflightLocked(w http.ResponseWriter, r *http.Request) *invocation {
	inv := s.inflight[r.PathValue("id")]
	if inv == nil {
		writeError(w, http.StatusBadRequest, "InvalidRequestID", "Invalid request ID")
	}
	return inv
}

// report reads the body of a runtime's report on the invocation its path
// names and hands both to settle, which answers w, with s.mu held. A body
// that cannot be read, or an invocation not in flight, is answered 400
// instead.
func (s *Server) report(w http.ResponseWriter, r *http.Request, settle func(inv *invocation, body []byte, tooLarge bool)) {
	body, tooLarge, ok := readBody(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if inv := s.inflightLocked(w, r); inv != nil {
		settle(inv, body, tooLarge)
	}
}

// handleResponse records a function's response.
func (s *Server) handleResponse(w http.ResponseWriter, r *http.Request) {
	s.report(w, r, func(inv *invocation, body []byte, tooLarge bool) {
		var res Result
		switch {
		case tooLarge:
			msg := fmt.Sprintf("Response payload size exceeded maximum allowed payload size (%d bytes).", maxResponseBytes)
			fe := &FunctionError{Type: "Function.ResponseSizeTooLarge", Message: msg}
			s.settleLocked(inv, Result{Outcome: OutcomeFunctionError, Payload: mustMarshal(fe), Error: fe})
			writeError(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", msg)
			return
		case r.Trailer.Get(headerErrorType) != "":
			// aws-lambda-go reports a handler's io.Reader that fails
			// half-way in trailers, after part of the body went out.
			doc, _ := base64.StdEncoding.DecodeString(r.Trailer.Get(trailerErrorBody))
			fe := parseFunctionError(doc, r.Trailer.Get(headerErrorType))
			if len(doc) == 0 {
				doc = mustMarshal(fe)
			}
			res = Result{Outcome: OutcomeFunctionError, Payload: doc, Error: fe}
		default:
			res = Result{Outcome: OutcomeSuccess, Payload: body}
		}
		s.settleLocked(inv, res)
		writeAccepted(w)
	})
}

// handleError records a function error.
func (s *Server) handleError(w http.ResponseWriter, r *http.Request) {
	s.report(w, r, func(inv *invocation, body []byte, tooLarge bool) {
		if tooLarge {
			body = body[:maxResponseBytes]
		}
		fe := parseFunctionError(body, r.Header.Get(headerErrorType))
		s.settleLocked(inv, Result{Outcome: OutcomeFunctionError, Payload: body, Error: fe})
		writeAccepted(w)
	})
}

// handleInitError records an init error; every queued event and every later
// one fails with it, since the runtime will never take them.
func (s *Server) handleInitError(w http.ResponseWriter, r *http.Request) {
	body, _, ok := readBody(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.initDone || s.initErr != nil {
		writeError(w, http.StatusForbidden, "InvalidStateTransition", "init is over: the runtime already asked for an event or reported an init error")
		return
	}
	if len(body) == 0 {
		body = mustMarshal(&FunctionError{Type: "Runtime.Unknown", Message: "the runtime posted an empty init error"})
	}
	s.initErr = body
	s.initErrType = r.Header.Get(headerErrorType)
	for _, inv := range slices.Clone(s.queue) {
		s.settleLocked(inv, s.initFailureLocked(inv.id))
	}
	s.broadcastLocked()
	writeAccepted(w)
}

// handleExtensionRegister registers an extension. aws-lambda-go registers one
// (with no events) when a function asks for SIGTERM at shutdown; serving it
// keeps that working and the function's log free of warnings.
func (s *Server) handleExtensionRegister(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Events []string `json:"events"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "InvalidRequest", "cannot decode the body: "+err.Error())
		return
	}
	if r.Header.Get(headerExtensionName) == "" {
		writeError(w, http.StatusBadRequest, "InvalidRequest", "missing "+headerExtensionName)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.initDone {
		writeError(w, http.StatusForbidden, "Extension.InvalidState", "extensions register during init only")
		return
	}
	id := newRequestID()
	s.extensions[id] = req.Events
	w.Header().Set(headerExtensionID, id)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(map[string]string{
		"functionName":    s.opts.FunctionName,
		"functionVersion": "$LATEST",
		"handler":         s.opts.Handler,
	})
}

// handleExtensionNext blocks until shutdown, then sends SHUTDOWN to an
// extension that registered for it. INVOKE events are not delivered.
func (s *Server) handleExtensionNext(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	events, ok := s.extensions[r.Header.Get(headerExtensionID)]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusForbidden, "Extension.UnknownExtensionIdentifier", "unknown "+headerExtensionID)
		return
	}
	select {
	case <-s.shutdown:
	case <-r.Context().Done():
		return
	case <-s.closing:
		return
	}
	if !slices.Contains(events, "SHUTDOWN") {
		// Not asked for: hold the request until the server closes.
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		return
	}
	s.mu.Lock()
	deadline := s.shutdownAtMs
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"eventType":      "SHUTDOWN",
		"shutdownReason": "spindown",
		"deadlineMs":     deadline,
	})
}

// writeAccepted answers a post the way Lambda does.
func writeAccepted(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"OK"}`)
}

// writeError answers with an error document, the shape Lambda uses for its
// own API errors too.
func writeError(w http.ResponseWriter, code int, errType, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(mustMarshal(&FunctionError{Type: errType, Message: msg}))
}

// newRequestID returns a random (version 4) UUID, the form of Lambda's
// request IDs.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// newTraceID returns an X-Ray trace header for a root segment that is not
// sampled, so that SDKs in the function trace nothing.
func newTraceID() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("Root=1-%08x-%x;Parent=%x;Sampled=0", time.Now().Unix(), b[:12], b[12:])
}
