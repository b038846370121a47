package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	"gopkg.in/yaml.v3"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// grants is what a role allows: actions by the logical ID of the
// template resource they apply to.
type grants map[string]map[string]bool

func (g grants) add(resource string, actions ...string) {
	if g[resource] == nil {
		g[resource] = map[string]bool{}
	}
	for _, a := range actions {
		g[resource][a] = true
	}
}

func (g grants) String() string {
	var b strings.Builder
	for _, r := range slices.Sorted(maps.Keys(g)) {
		fmt.Fprintf(&b, "\n  %s: %v", r, slices.Sorted(maps.Keys(g[r])))
	}
	return b.String()
}

// The function's role allows exactly what the function does, on the
// stack's own resources, and nothing on "*": the DynamoDB actions that
// the code was seen calling on each table (TransactWriteItems is
// authorised per action it contains), the SQS actions it was seen calling
// on its dead-letter queue, and what the platform does on the
// function's behalf (the SQS event source polls the queue, Lambda writes
// the logs).
func TestTemplateRoleIsLeastPrivilege(t *testing.T) {
	tpl := loadTemplate(t)
	fn := tpl.onlyResource(t, "AWS::Serverless::Function")
	props := mapping(t, tpl.resources[fn].props)

	// SAM's Policies would attach managed policies with Resource "*".
	for _, key := range []string{"Policies", "PermissionsBoundary"} {
		if props[key] != nil {
			t.Errorf("%s has %s; want only its explicit Role", fn, key)
		}
	}
	role := tpl.ref(t, props["Role"])
	if tpl.resources[role].typ != "AWS::IAM::Role" {
		t.Fatalf("%s's Role is %s; want an AWS::IAM::Role of the template", fn, role)
	}
	for id, r := range tpl.resources {
		if r.typ == "AWS::IAM::Policy" || r.typ == "AWS::IAM::ManagedPolicy" || (r.typ == "AWS::IAM::Role" && id != role) {
			t.Errorf("template has %s (%s); want the function's role to be the only grant", id, r.typ)
		}
	}
	roleProps := mapping(t, tpl.resources[role].props)
	if roleProps["ManagedPolicyArns"] != nil {
		t.Errorf("%s has ManagedPolicyArns; want inline statements only", role)
	}

	got := grants{}
	for _, stmt := range tpl.statements(t, roleProps["Policies"]) {
		s := mapping(t, stmt)
		if effect := s["Effect"]; effect == nil || effect.Value != "Allow" {
			t.Errorf("statement %s: Effect %v; want Allow (a Deny here would hide a broader grant)", describeNode(stmt), effect)
		}
		for _, key := range []string{"NotAction", "NotResource", "Condition"} {
			if s[key] != nil {
				t.Errorf("statement %s has %s; want plain Action and Resource", describeNode(stmt), key)
			}
		}
		actions := strs(t, s["Action"])
		for _, a := range actions {
			if strings.Contains(a, "*") {
				t.Errorf("action %q is a wildcard; want named actions", a)
			}
		}
		if s["Resource"] == nil {
			t.Errorf("statement %s has no Resource", describeNode(stmt))
			continue
		}
		for _, res := range list(s["Resource"]) {
			got.add(tpl.ref(t, res), actions...)
		}
	}

	want := grants{}
	// The platform, on the function's behalf: the SQS event source
	// mapping polls and deletes (AWSLambdaSQSQueueExecutionRole's actions),
	// and Lambda writes the logs into the group the template creates
	// (hence no logs:CreateLogGroup).
	for name, e := range mapping(t, props["Events"]) {
		ev := mapping(t, e)
		if ev["Type"].Value != "SQS" {
			t.Errorf("event %s is %s; want SQS only, or this test taught its permissions", name, ev["Type"].Value)
			continue
		}
		want.add(tpl.ref(t, mapping(t, ev["Properties"])["Queue"]), "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
	}
	logGroup := tpl.ref(t, mapping(t, props["LoggingConfig"])["LogGroup"])
	want.add(logGroup, "logs:CreateLogStream", "logs:PutLogEvents")
	// The code: every DynamoDB action it was seen to take, on each table.
	for table, actions := range dynamoDBActionsUsed(t) {
		want.add(table, slices.Collect(maps.Keys(actions))...)
	}
	// And every SQS action, on the queue its environment names as the
	// dead-letter queue.
	vars := mapping(t, mapping(t, props["Environment"])["Variables"])
	dlq := tpl.ref(t, vars["DEAD_LETTER_QUEUE_URL"])
	if tpl.resources[dlq].typ != "AWS::SQS::Queue" {
		t.Errorf("DEAD_LETTER_QUEUE_URL refers to %s (%s); want a queue", dlq, tpl.resources[dlq].typ)
	}
	for _, action := range sqsActionsUsed(t) {
		want.add(dlq, action)
	}

	if got.String() != want.String() {
		t.Errorf("role %s grants:%s\nwant exactly:%s", role, got, want)
	}
}

// Every statement anywhere in the template names its resources, never
// "*".
func TestTemplateHasNoWildcardResources(t *testing.T) {
	raw, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	walk(&doc, func(key string, v *yaml.Node) {
		if key != "Resource" && key != "NotResource" {
			return
		}
		n++
		walk(v, func(_ string, s *yaml.Node) {
			if s.Kind == yaml.ScalarNode && strings.Contains(s.Value, "*") {
				t.Errorf("line %d: resource %q contains a wildcard", s.Line, s.Value)
			}
		})
		if v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
			t.Errorf("line %d: resource %q is a literal; want one of the template's own resources", v.Line, v.Value)
		}
	})
	if n == 0 {
		t.Error("found no Resource in the template; want the role's statements")
	}
}

// Queues and tables are encrypted at rest, with keys SQS and DynamoDB
// manage (no KMS grants needed) or a KMS key.
func TestTemplateEncryptsQueuesAndTables(t *testing.T) {
	tpl := loadTemplate(t)
	var queues, tables int
	for id, r := range tpl.resources {
		switch r.typ {
		case "AWS::SQS::Queue":
			queues++
			p := mapping(t, r.props)
			sse := p["SqsManagedSseEnabled"]
			if (sse == nil || sse.Value != "true") && p["KmsMasterKeyId"] == nil {
				t.Errorf("queue %s: neither SqsManagedSseEnabled: true nor KmsMasterKeyId; want encryption at rest", id)
			}
		case "AWS::DynamoDB::Table":
			tables++
			spec := mapping(t, r.props)["SSESpecification"]
			if spec == nil || mapping(t, spec)["SSEEnabled"] == nil || mapping(t, spec)["SSEEnabled"].Value != "true" {
				t.Errorf("table %s: no SSESpecification with SSEEnabled: true", id)
			}
		}
	}
	if queues == 0 || tables == 0 {
		t.Errorf("found %d queues and %d tables; want the template's", queues, tables)
	}
}

// dynamoDBActionsUsed runs the payment function on moto through every path
// that touches DynamoDB (a charge, a decline, a transient gateway failure
// that releases the lock, a duplicate, a payload mismatch) and returns the
// IAM actions its requests need, by the template's logical table ID.
func dynamoDBActionsUsed(t *testing.T) grants {
	t.Helper()
	f := setup(t, nil)
	logical := map[string]string{f.cfg.IdempotencyTable: "IdempotencyTable", f.cfg.PaymentsTable: "PaymentsTable"}
	used := grants{}
	var unknown []string
	recorder := func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("recordActions",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				for _, a := range iamActions(stack.ID(), in.Parameters) {
					if id, ok := logical[a.table]; ok {
						used.add(id, a.action)
					} else {
						unknown = append(unknown, a.action+" on "+a.table)
					}
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
	db := dynamodb.NewFromConfig(moto.Config(t), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, recorder)
	})
	handler := mustHandler(t, f.cfg, db, &http.Client{Timeout: 2 * time.Second}, slog.New(slog.DiscardHandler))
	run := func(bodies ...string) {
		for _, b := range bodies {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, _ = handler(ctx, lambdakittest.Event(lambdakittest.Message(b)))
			cancel()
		}
	}
	f.gw.FailNext(1)
	run(body("pay_iam_1", "cus_1", 100)) // transient failure: acquire, release
	run(body("pay_iam_1", "cus_1", 100), // charged: acquire, complete with the ledger row
		body("pay_iam_1", "cus_1", 100),                           // duplicate
		body("pay_iam_1", "cus_1", 999),                           // payload mismatch
		body("pay_iam_2", gateway.DeclinedCustomerPrefix+"_1", 5)) // declined
	// A re-driven duplicate in a fresh container: read ahead
	// (BatchGetItem) before any lock.
	handler = mustHandler(t, f.cfg, db, &http.Client{Timeout: 2 * time.Second}, slog.New(slog.DiscardHandler))
	redriven := lambdakittest.Redelivery(lambdakittest.Message(body("pay_iam_1", "cus_1", 100)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, _ = handler(ctx, lambdakittest.Event(redriven))
	cancel()
	if len(f.gw.Charges()) != 1 {
		t.Fatalf("got %d charges; want the scenarios to have run (1 charge)", len(f.gw.Charges()))
	}
	if len(unknown) > 0 {
		t.Errorf("DynamoDB requests on tables the template does not declare: %v", unknown)
	}
	return used
}

// sqsActionsUsed runs the payment function with a dead-letter queue on moto
// on an invalid payment, and returns the IAM actions of the SQS requests it
// makes, all of which must be on that queue.
func sqsActionsUsed(t *testing.T) []string {
	t.Helper()
	f := setup(t, nil)
	client := sqs.NewFromConfig(moto.Config(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dlqURL := testenv.Queue(t, client, true, nil)
	used := map[string]bool{}
	recorder := func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("recordActions",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				send, ok := in.Parameters.(*sqs.SendMessageInput)
				if !ok || aws.ToString(send.QueueUrl) != dlqURL {
					t.Errorf("SQS request %s %+v; want only SendMessage to the dead-letter queue", stack.ID(), in.Parameters)
				}
				used["sqs:"+stack.ID()] = true
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
	recorded := sqs.NewFromConfig(moto.Config(t), func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, recorder) })
	handler := mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 2 * time.Second}, slog.New(slog.DiscardHandler), withDeadLetterQueue(recorded, dlqURL))
	invalid := lambdakittest.Message(`{"payment_id":"pay_iam_3","order_id":"ord_1","customer_id":"cus_1","amount":-5,"currency":"EUR"}`, lambdakittest.InGroup("cus_1"))
	resp, err := handler(ctx, lambdakittest.Event(invalid))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("invalid payment: error %v, failures %v; want it sent to the dead-letter queue", err, resp.BatchItemFailures)
	}
	if got := testenv.Drain(t, client, dlqURL); len(got) != 1 {
		t.Fatalf("the dead-letter queue holds %d messages; want the invalid payment", len(got))
	}
	return slices.Sorted(maps.Keys(used))
}

// tableAction is an IAM action on a table.
type tableAction struct{ table, action string }

// iamActions maps a DynamoDB request to the IAM actions it needs: a
// transaction needs the action of each write it contains.
func iamActions(op string, params any) []tableAction {
	var out []tableAction
	add := func(table *string, action string) {
		out = append(out, tableAction{aws.ToString(table), "dynamodb:" + action})
	}
	switch in := params.(type) {
	case *dynamodb.TransactWriteItemsInput:
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				add(it.Put.TableName, "PutItem")
			case it.Update != nil:
				add(it.Update.TableName, "UpdateItem")
			case it.Delete != nil:
				add(it.Delete.TableName, "DeleteItem")
			case it.ConditionCheck != nil:
				add(it.ConditionCheck.TableName, "ConditionCheckItem")
			}
		}
	case *dynamodb.BatchGetItemInput:
		for table := range in.RequestItems {
			add(aws.String(table), "BatchGetItem")
		}
	default:
		// Single-table operations name their table in TableName.
		if t, ok := tableName(params); ok {
			add(t, op)
		} else {
			out = append(out, tableAction{"(no table)", "dynamodb:" + op})
		}
	}
	return out
}

func tableName(params any) (*string, bool) {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		return in.TableName, true
	case *dynamodb.UpdateItemInput:
		return in.TableName, true
	case *dynamodb.DeleteItemInput:
		return in.TableName, true
	case *dynamodb.GetItemInput:
		return in.TableName, true
	case *dynamodb.QueryInput:
		return in.TableName, true
	case *dynamodb.ScanInput:
		return in.TableName, true
	}
	return nil, false
}

// template is template.yaml's resources, with their properties as YAML
// nodes: CloudFormation's short tags (!GetAtt, !Ref, !Sub) stay as tags.
type template struct {
	resources map[string]resource
}

type resource struct {
	typ   string
	props *yaml.Node
}

func loadTemplate(t *testing.T) *template {
	t.Helper()
	res, err := samtemplate.Resources(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &template{resources: map[string]resource{}}
	for id, r := range res {
		props := r.Properties
		tpl.resources[id] = resource{typ: r.Type, props: &props}
	}
	return tpl
}

func (tpl *template) onlyResource(t *testing.T, typ string) string {
	t.Helper()
	var ids []string
	for id, r := range tpl.resources {
		if r.typ == typ {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("template has %d resources of type %s (%v); want 1", len(ids), typ, ids)
	}
	return ids[0]
}

// subRef matches a ${Name} or ${Name.Attr} in a !Sub string.
var subRef = regexp.MustCompile(`\$\{([^}!]+)\}`)

// ref returns the logical ID of the template resource that n refers to
// (!Ref X, !GetAtt X.Arn, !Sub with one ${X} or ${X.Attr}, or their long
// forms), and fails t for anything else: a literal ARN, a parameter, a
// wildcard.
func (tpl *template) ref(t *testing.T, n *yaml.Node) string {
	t.Helper()
	if n == nil {
		t.Fatal("missing reference")
	}
	tag, v := n.Tag, n
	if n.Kind == yaml.MappingNode && len(n.Content) == 2 {
		tag = map[string]string{"Ref": "!Ref", "Fn::GetAtt": "!GetAtt", "Fn::Sub": "!Sub"}[n.Content[0].Value]
		v = n.Content[1]
	}
	var id string
	switch tag {
	case "!Ref":
		id = v.Value
	case "!GetAtt":
		if v.Kind == yaml.SequenceNode && len(v.Content) == 2 {
			id = v.Content[0].Value
		} else {
			id, _, _ = strings.Cut(v.Value, ".")
		}
	case "!Sub":
		if strings.Contains(v.Value, "*") {
			t.Errorf("line %d: %q contains a wildcard", v.Line, v.Value)
		}
		var own []string
		for _, m := range subRef.FindAllStringSubmatch(v.Value, -1) {
			name, _, _ := strings.Cut(m[1], ".")
			if _, ok := tpl.resources[name]; ok {
				own = append(own, name)
			}
		}
		if len(own) != 1 {
			t.Fatalf("line %d: %q names %d of the template's resources; want exactly 1", v.Line, v.Value, len(own))
		}
		id = own[0]
	default:
		t.Fatalf("line %d: %s is not a reference to one of the template's resources", n.Line, describeNode(n))
	}
	if _, ok := tpl.resources[id]; !ok {
		t.Fatalf("line %d: %q is not a resource of the template", n.Line, id)
	}
	return id
}

// statements returns the statements of a role's Policies.
func (tpl *template) statements(t *testing.T, policies *yaml.Node) []*yaml.Node {
	t.Helper()
	if policies == nil {
		t.Fatal("role has no Policies")
	}
	var out []*yaml.Node
	for _, p := range list(policies) {
		doc := mapping(t, mapping(t, p)["PolicyDocument"])
		out = append(out, list(doc["Statement"])...)
	}
	return out
}

func mapping(t *testing.T, n *yaml.Node) map[string]*yaml.Node {
	t.Helper()
	if n == nil || n.Kind != yaml.MappingNode {
		t.Fatalf("%s: want a mapping", describeNode(n))
	}
	m := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		m[n.Content[i].Value] = n.Content[i+1]
	}
	return m
}

// list returns a sequence's items, or n itself when it is a single item.
func list(n *yaml.Node) []*yaml.Node {
	if n != nil && n.Kind == yaml.SequenceNode {
		return n.Content
	}
	return []*yaml.Node{n}
}

func strs(t *testing.T, n *yaml.Node) []string {
	t.Helper()
	var out []string
	for _, s := range list(n) {
		if s == nil || s.Kind != yaml.ScalarNode {
			t.Fatalf("%s: want a string", describeNode(s))
		}
		out = append(out, s.Value)
	}
	return out
}

// walk calls fn for every value in n, with the key it is under in its
// mapping ("" in a sequence).
func walk(n *yaml.Node, fn func(key string, v *yaml.Node)) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			fn("", c)
			walk(c, fn)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			fn(n.Content[i].Value, n.Content[i+1])
			walk(n.Content[i+1], fn)
		}
	}
}

func describeNode(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	b, _ := yaml.Marshal(n)
	return fmt.Sprintf("%q (line %d)", strings.TrimSpace(string(b)), n.Line)
}

// The template's alarms on lambdakit's metrics name metrics and dimensions
// that the batch adapter really writes.
func TestTemplateAlarmsWatchMetricsThatExist(t *testing.T) {
	var out bytes.Buffer
	b := lambdakit.Batch(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil }),
		func(o *lambdakit.BatchOptions) {
			o.Logger = slog.New(slog.DiscardHandler)
			o.MetricsWriter = &out
		})
	if _, err := b(context.Background(), lambdakittest.Event(lambdakittest.Message(`{}`))); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("metrics line %q: %v", out.String(), err)
	}
	directive := line["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	tpl := loadTemplate(t)
	alarms := 0
	for id, r := range tpl.resources {
		if r.typ != "AWS::CloudWatch::Alarm" {
			continue
		}
		props := mapping(t, r.props)
		if props["Namespace"].Value != directive["Namespace"] {
			continue
		}
		alarms++
		if _, ok := line[props["MetricName"].Value].(float64); !ok {
			t.Errorf("alarm %s watches %s, which the metrics line does not have", id, props["MetricName"].Value)
		}
		var dims []string
		for _, d := range list(props["Dimensions"]) {
			dims = append(dims, mapping(t, d)["Name"].Value)
		}
		if got, want := strings.Join(dims, ","), "FunctionName,QueueName"; got != want {
			t.Errorf("alarm %s: dimensions %s; want %s, the metrics' own", id, got, want)
		}
	}
	if alarms == 0 {
		t.Error("no alarm on lambdakit's metrics; want at least one")
	}
}

// The idempotency TTL outlives the longest way a copy of a completed payment
// can come back: the queue's retention (the event source mapping disabled),
// the DLQ's (a FIFO queue restarts the clock when it moves a message there),
// and the queue's again after a redrive, which sends a new message.
func TestTemplateTTLOutlivesEveryWayBack(t *testing.T) {
	tpl := loadTemplate(t)
	retention := func(id string) time.Duration {
		t.Helper()
		r, ok := tpl.resources[id]
		if !ok {
			t.Fatalf("template has no %s", id)
		}
		v := mapping(t, r.props)["MessageRetentionPeriod"]
		if v == nil {
			return 4 * 24 * time.Hour // SQS's default
		}
		d, err := time.ParseDuration(v.Value + "s")
		if err != nil {
			t.Fatalf("%s MessageRetentionPeriod %q: %v", id, v.Value, err)
		}
		return d
	}
	fn := tpl.resources[tpl.onlyResource(t, "AWS::Serverless::Function")]
	env := mapping(t, mapping(t, mapping(t, fn.props)["Environment"])["Variables"])
	ttl, err := time.ParseDuration(env["IDEMPOTENCY_TTL"].Value)
	if err != nil {
		t.Fatalf("IDEMPOTENCY_TTL: %v", err)
	}
	need := 2*retention("PaymentQueue") + retention("PaymentDLQ")
	if ttl <= need {
		t.Errorf("IDEMPOTENCY_TTL %v; want more than 2 x queue retention + DLQ retention = %v", ttl, need)
	}
	if defaultTTL != ttl {
		t.Errorf("the function's default TTL %v; want the template's %v, so that a function run without it is as safe", defaultTTL, ttl)
	}
}
