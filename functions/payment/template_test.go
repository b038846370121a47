package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"go/build"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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

// Each function's role allows exactly what the function does, on the
// stack's own resources, and nothing on "*". The payment function: the
// DynamoDB actions that the code was seen calling on each table
// (TransactWriteItems is authorised per action it contains), the SQS
// actions it was seen calling on its dead-letter queue, and what the
// platform does on its behalf (the SQS event source polls the queue,
// Lambda writes the logs). The relay: SendMessage, its only call, to the
// queue the payment function publishes to and to its dead-letter queue;
// and for the platform, the stream reads of its event source, the
// on-failure destination's SendMessage, and the logs. The ledger: PutItem
// and BatchGetItem on its table, and for the platform its queue's polling
// and the logs.
func TestTemplateRoleIsLeastPrivilege(t *testing.T) {
	tpl := loadTemplate(t)
	roles := map[string]string{} // role: function
	for _, fn := range tpl.resourcesOf("AWS::Serverless::Function") {
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
		if other, ok := roles[role]; ok {
			t.Errorf("%s and %s share the role %s; want one role per function", other, fn, role)
		}
		roles[role] = fn
	}
	for id, r := range tpl.resources {
		if _, own := roles[id]; r.typ == "AWS::IAM::Policy" || r.typ == "AWS::IAM::ManagedPolicy" || (r.typ == "AWS::IAM::Role" && !own) {
			t.Errorf("template has %s (%s); want the functions' roles to be the only grants", id, r.typ)
		}
	}

	wants := map[string]grants{}
	for _, fn := range roles {
		wants[fn] = tpl.platformGrants(t, fn)
	}
	payment, relay, ledger := wants["PaymentFunction"], wants["RelayFunction"], wants["LedgerFunction"]
	if payment == nil || relay == nil || ledger == nil || len(wants) != 3 {
		t.Fatalf("template functions %v; want PaymentFunction, RelayFunction and LedgerFunction (or this test taught the others)", slices.Sorted(maps.Values(roles)))
	}
	// The payment function's code: every DynamoDB action it was seen to
	// take, on each table, and every SQS action, on the queue its
	// environment names as the dead-letter queue.
	for table, actions := range dynamoDBActionsUsed(t) {
		payment.add(table, slices.Collect(maps.Keys(actions))...)
	}
	dlq := tpl.envQueue(t, "PaymentFunction", "DEAD_LETTER_QUEUE_URL")
	for _, action := range sqsActionsUsed(t) {
		payment.add(dlq, action)
	}
	// And the backoff's visibility changes, on the queue it consumes
	// (lambdakit/producer's visibility tests make them on moto).
	payment.add(tpl.envQueue(t, "PaymentFunction", "SOURCE_QUEUE_URL"), "sqs:ChangeMessageVisibility")
	// The relay's code sends the items to the queue the payment function
	// publishes to, and what it cannot send to its dead-letter queue.
	relay.add(tpl.envQueue(t, "PaymentFunction", "EVENTS_QUEUE_URL"), "sqs:SendMessage")
	relay.add(tpl.envQueue(t, "RelayFunction", "DEAD_LETTER_QUEUE_URL"), "sqs:SendMessage")
	// The ledger's code: one PutItem per entry (the one-request path), and
	// the read ahead of a redelivered batch (functions/ledger's tests
	// count them).
	ledger.add(tpl.envTable(t, "LedgerFunction", "LEDGER_TABLE"), "dynamodb:PutItem", "dynamodb:BatchGetItem")

	for role, fn := range roles {
		got := grants{}
		for _, stmt := range tpl.statements(t, mapping(t, tpl.resources[role].props)["Policies"]) {
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
		if mapping(t, tpl.resources[role].props)["ManagedPolicyArns"] != nil {
			t.Errorf("%s has ManagedPolicyArns; want inline statements only", role)
		}
		if got.String() != wants[fn].String() {
			t.Errorf("role %s of %s grants:%s\nwant exactly:%s", role, fn, got, wants[fn])
		}
	}
}

// platformGrants is what Lambda does with fn's role: each event source
// mapping's reads (the actions of AWSLambdaSQSQueueExecutionRole and
// AWSLambdaDynamoDBExecutionRole) and its on-failure destination's send,
// and the logs written into the group the template creates (hence no
// logs:CreateLogGroup).
func (tpl *template) platformGrants(t *testing.T, fn string) grants {
	t.Helper()
	props := mapping(t, tpl.resources[fn].props)
	want := grants{}
	for name, e := range mapping(t, props["Events"]) {
		ev := mapping(t, e)
		p := mapping(t, ev["Properties"])
		switch ev["Type"].Value {
		case "SQS":
			want.add(tpl.ref(t, p["Queue"]), "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
		case "DynamoDB":
			want.add(tpl.ref(t, p["Stream"]), "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams")
		default:
			t.Errorf("%s's event %s is %s; want SQS or DynamoDB, or this test taught its permissions", fn, name, ev["Type"].Value)
			continue
		}
		if dc := p["DestinationConfig"]; dc != nil {
			onFailure := mapping(t, mapping(t, dc)["OnFailure"])
			if onFailure["Type"] == nil || onFailure["Type"].Value != "SQS" {
				t.Errorf("%s's event %s: on-failure destination %s; want an SQS queue", fn, name, describeNode(mapping(t, dc)["OnFailure"]))
				continue
			}
			want.add(tpl.ref(t, onFailure["Destination"]), "sqs:SendMessage")
		}
	}
	want.add(tpl.ref(t, mapping(t, props["LoggingConfig"])["LogGroup"]), "logs:CreateLogStream", "logs:PutLogEvents")
	return want
}

// envTable is the table, and envQueue the queue, that fn's environment
// variable name refers to.
func (tpl *template) envTable(t *testing.T, fn, name string) string {
	t.Helper()
	return tpl.envRef(t, fn, name, "AWS::DynamoDB::Table")
}

func (tpl *template) envQueue(t *testing.T, fn, name string) string {
	t.Helper()
	return tpl.envRef(t, fn, name, "AWS::SQS::Queue")
}

func (tpl *template) envRef(t *testing.T, fn, name, typ string) string {
	t.Helper()
	vars := mapping(t, mapping(t, mapping(t, tpl.resources[fn].props)["Environment"])["Variables"])
	id := tpl.ref(t, vars[name])
	if tpl.resources[id].typ != typ {
		t.Errorf("%s's %s refers to %s (%s); want a %s", fn, name, id, tpl.resources[id].typ, typ)
	}
	return id
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
	// As deployed: the function publishes payment.charged on the
	// payment's row.
	f.cfg.EventsQueueURL = testenv.Queue(t, sqs.NewFromConfig(moto.Config(t)), true, nil)
	logical := map[string]string{f.cfg.PaymentsTable: "PaymentsTable"}
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
	run(body("pay_iam_1", "cus_1", 100), // charged: acquire, complete with the ledger fields and the event
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

// resourcesOf returns the logical IDs of the template's resources of type
// typ, sorted.
func (tpl *template) resourcesOf(typ string) []string {
	var ids []string
	for id, r := range tpl.resources {
		if r.typ == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
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
		var attr string
		if v.Kind == yaml.SequenceNode && len(v.Content) == 2 {
			id, attr = v.Content[0].Value, v.Content[1].Value
		} else {
			id, attr, _ = strings.Cut(v.Value, ".")
		}
		if attr == "StreamArn" {
			// A table's stream is a resource of its own for IAM.
			if _, ok := tpl.resources[id]; !ok {
				t.Fatalf("line %d: %q is not a resource of the template", n.Line, id)
			}
			return id + ".StreamArn"
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

// The function keeps payments forever: a copy of a charged payment may
// come back after any time (a DLQ redrive after the queues' retention), and
// must find its record. So the template gives the function no TTL to set;
// the payments table's TTL is on dynamostore's expiration attribute, which
// a completed payment's row does not have (lambdakit.NeverExpire), and an
// in-progress row, the lock of an owner that may die, does.
func TestTemplateKeepsPaymentsForever(t *testing.T) {
	tpl := loadTemplate(t)
	env := mapping(t, mapping(t, mapping(t, tpl.resources["PaymentFunction"].props)["Environment"])["Variables"])
	for _, name := range []string{"IDEMPOTENCY_TTL", "IDEMPOTENCY_TABLE"} {
		if env[name] != nil {
			t.Errorf("PaymentFunction has %s; the function no longer reads it", name)
		}
	}
	if got := tpl.envTable(t, "PaymentFunction", "PAYMENTS_TABLE"); got != "PaymentsTable" {
		t.Fatalf("PAYMENTS_TABLE refers to %s; want PaymentsTable", got)
	}
	spec := mapping(t, mapping(t, tpl.resources["PaymentsTable"].props)["TimeToLiveSpecification"])
	if spec["AttributeName"] == nil || spec["AttributeName"].Value != "expiration" || spec["Enabled"] == nil || spec["Enabled"].Value != "true" {
		t.Errorf("PaymentsTable TimeToLiveSpecification %v; want AttributeName expiration, Enabled true", spec)
	}

	var (
		f    *fixture
		lock map[string]types.AttributeValue
	)
	f = setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lock = f.ledger(t, "pay_forever") // the row while the charge runs
		f.gw.ServeHTTP(w, r)
	}))
	if failed := f.run(t, lambdakittest.Message(body("pay_forever", "cus_1", 100))); len(failed) != 0 {
		t.Fatalf("got failures %v; want the payment charged", failed)
	}
	if attr(lock, recordStatusAttr) != "INPROGRESS" || attr(lock, "expiration") == "" {
		t.Errorf("in-progress row %v; want INPROGRESS with an expiration, so that a dead owner's lock goes", lock)
	}
	row := f.ledger(t, "pay_forever")
	if attr(row, recordStatusAttr) != "COMPLETED" || attr(row, "status") != StatusCharged {
		t.Fatalf("completed row %v; want COMPLETED and CHARGED", row)
	}
	if _, ok := row["expiration"]; ok {
		t.Errorf("completed row has expiration %s; want none, the payment kept forever", attr(row, "expiration"))
	}
}

// samDocument is what the tests below read of template.yaml besides
// resources' properties: parameters, and resources' metadata.
type samDocument struct {
	Parameters map[string]struct {
		Type           string   `yaml:"Type"`
		Default        *string  `yaml:"Default"`
		AllowedPattern string   `yaml:"AllowedPattern"`
		AllowedValues  []string `yaml:"AllowedValues"`
	} `yaml:"Parameters"`
	Resources map[string]struct {
		Type       string    `yaml:"Type"`
		Metadata   yaml.Node `yaml:"Metadata"`
		Properties yaml.Node `yaml:"Properties"`
	} `yaml:"Resources"`
}

func loadSAMDocument(t *testing.T) samDocument {
	t.Helper()
	raw, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc samDocument
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// samconfigPath is the SAM CLI's configuration beside the template.
const samconfigPath = "../../samconfig.toml"

// readSamconfig reads samconfig.toml's tables into key/value maps, by table
// name ("default.deploy.parameters"), string values unquoted: enough TOML
// for the flat file the SAM CLI reads.
func readSamconfig(t *testing.T) map[string]map[string]string {
	t.Helper()
	raw, err := os.ReadFile(samconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	table := ""
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			table = strings.Trim(line, "[]")
			out[table] = map[string]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s:%d: %q is neither a table nor key = value", samconfigPath, i+1, line)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if strings.HasPrefix(v, `"`) {
				u, err := strconv.Unquote(v)
				if err != nil {
					t.Fatalf("%s:%d: %s: %v", samconfigPath, i+1, v, err)
				}
				v = u
			}
			if out[table] == nil {
				out[table] = map[string]string{}
			}
			out[table][k] = v
		}
	}
	return out
}

// parameterOverrides splits a parameter_overrides value, Key="value"
// pairs, as the SAM CLI does.
func parameterOverrides(t *testing.T, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	rest := strings.TrimSpace(s)
	pair := regexp.MustCompile(`^([A-Za-z0-9]+)=("(?:[^"\\]|\\.)*"|\S+)\s*`)
	for rest != "" {
		m := pair.FindStringSubmatch(rest)
		if m == nil {
			t.Fatalf("parameter_overrides %q: cannot read %q", s, rest)
		}
		v := m[2]
		if strings.HasPrefix(v, `"`) {
			v, _ = strconv.Unquote(v)
		}
		out[m[1]] = v
		rest = rest[len(m[0]):]
	}
	return out
}

// reservedHost reports whether host is a name reserved for examples and
// tests (RFC 2606, RFC 6761): a placeholder, never a real gateway.
func reservedHost(host string) bool {
	host = strings.ToLower(host)
	for _, suffix := range []string{"example.com", "example.net", "example.org", ".example", ".test", ".invalid", ".localhost"} {
		if host == strings.TrimPrefix(suffix, ".") || strings.HasSuffix(host, "."+strings.TrimPrefix(suffix, ".")) {
			return true
		}
	}
	return host == "localhost"
}

// The gateway URL is required: no default in the template, none in
// samconfig.toml's [default], so that `sam deploy --guided` asks for it
// instead of offering a placeholder, and a deploy without one fails. Its
// AllowedPattern takes an https:// URL only, so that pressing Enter at the
// prompt (an empty value), a placeholder without a scheme, http:// or a
// typo fails the deploy before anything is created. (CloudFormation's
// patterns are Java's; this one uses nothing Go's RE2 reads differently.)
func TestTemplateGatewayURLIsRequiredHTTPS(t *testing.T) {
	doc := loadSAMDocument(t)
	p, ok := doc.Parameters["PaymentGatewayUrl"]
	if !ok {
		t.Fatal("template.yaml has no PaymentGatewayUrl parameter")
	}
	if p.Default != nil {
		t.Errorf("PaymentGatewayUrl has Default %q; want none: a placeholder default deploys a function whose every charge fails", *p.Default)
	}
	re, err := regexp.Compile(p.AllowedPattern)
	if p.AllowedPattern == "" || err != nil {
		t.Fatalf("PaymentGatewayUrl AllowedPattern %q: %v; want an https:// URL pattern", p.AllowedPattern, err)
	}
	for _, good := range []string{
		"https://api.stripe.com",
		"https://api.stripe.com/v1",
		"https://pay.corp.internal:8443/gateway/v2/",
		"https://10.0.0.5",
		"https://gw-1.eu-west-1.payments.acme.io/v1?region=eu",
	} {
		if !re.MatchString(good) {
			t.Errorf("AllowedPattern refuses %q; want it accepted", good)
		}
	}
	for _, bad := range []string{
		"",                                // Enter at sam deploy --guided's prompt
		"REPLACE_ME",                      // a placeholder
		"sandbox.gateway.example.com",     // no scheme
		"http://gateway.acme.io",          // not TLS
		"https://",                        // no host
		"https:/gateway.acme.io",          // typo
		"https//gateway.acme.io",          // typo
		"https://gateway.acme.io/ v1",     // a space
		" https://gateway.acme.io",        // a leading space
		"https://gateway.acme.io ",        // a trailing space
		"https://gateway.acme.io:port/v1", // a port that is not one
		"https://-gateway.acme.io",        // not a host name
		"https://gateway.acme.io,https://other.acme.io",
		"https://gateway.acme.io/v1#charges", // a fragment, which the function refuses at start
	} {
		if re.MatchString(bad) {
			t.Errorf("AllowedPattern accepts %q; want it refused at deploy", bad)
		}
	}

	// The function gets the parameter itself.
	fn := doc.Resources["PaymentFunction"]
	var props struct {
		Environment struct {
			Variables map[string]yaml.Node `yaml:"Variables"`
		} `yaml:"Environment"`
	}
	if err := fn.Properties.Decode(&props); err != nil {
		t.Fatal(err)
	}
	if v := props.Environment.Variables["PAYMENT_GATEWAY_URL"]; v.Tag != "!Ref" || v.Value != "PaymentGatewayUrl" {
		t.Errorf("PAYMENT_GATEWAY_URL is %s %q; want !Ref PaymentGatewayUrl", v.Tag, v.Value)
	}

	// samconfig.toml offers no value that a deploy would use silently:
	// none in [default] (sam deploy --guided then asks), and any other a
	// real https:// URL.
	for table, kv := range readSamconfig(t) {
		v, ok := parameterOverrides(t, kv["parameter_overrides"])["PaymentGatewayUrl"]
		if !ok {
			continue
		}
		if table == "default.deploy.parameters" {
			t.Errorf("samconfig.toml [%s] sets PaymentGatewayUrl %q; want none, so that sam deploy --guided asks for it", table, v)
		}
		if !strings.HasSuffix(table, ".deploy.parameters") {
			t.Errorf("samconfig.toml [%s] sets PaymentGatewayUrl %q; want it only where sam deploy reads it (local runs take PAYMENT_GATEWAY_URL from events/env.json)", table, v)
		}
		if !re.MatchString(v) {
			t.Errorf("samconfig.toml [%s]: PaymentGatewayUrl %q does not match the template's AllowedPattern", table, v)
		}
		host := strings.TrimPrefix(v, "https://")
		host, _, _ = strings.Cut(host, "/")
		host, _, _ = strings.Cut(host, ":")
		if reservedHost(host) {
			t.Errorf("samconfig.toml [%s]: PaymentGatewayUrl %q is a placeholder (%s is reserved for examples)", table, v, host)
		}
	}
}

// sam build builds only the function, in place: BuildMethod go1.x (SAM's
// Go builder runs `go build` in CodeUri and copies nothing, where the
// makefile method copies CodeUri first, which for a makefile that needs the
// module is the whole repository, .venv/ and bin/ included). CodeUri is
// the function's own package, below the module root that go build finds;
// GOARCH follows the function's Architectures, a parameter that is arm64
// unless a local run on an x86-64 machine asks for x86_64.
func TestTemplateBuildsOnlyTheFunction(t *testing.T) {
	doc := loadSAMDocument(t)
	fn, ok := doc.Resources["PaymentFunction"]
	if !ok || fn.Type != "AWS::Serverless::Function" {
		t.Fatal("template.yaml has no AWS::Serverless::Function PaymentFunction")
	}
	var meta struct {
		BuildMethod     string `yaml:"BuildMethod"`
		BuildProperties struct {
			TrimGoPath bool `yaml:"TrimGoPath"`
		} `yaml:"BuildProperties"`
	}
	if err := fn.Metadata.Decode(&meta); err != nil {
		t.Fatalf("PaymentFunction Metadata: %v", err)
	}
	if meta.BuildMethod != "go1.x" {
		t.Errorf("BuildMethod %q; want go1.x, which builds in CodeUri without copying it", meta.BuildMethod)
	}
	if !meta.BuildProperties.TrimGoPath {
		t.Error("BuildProperties.TrimGoPath is not true; want -trimpath, so that the binary does not depend on where it was built")
	}
	var props struct {
		CodeUri       string      `yaml:"CodeUri"`
		Handler       string      `yaml:"Handler"`
		Runtime       string      `yaml:"Runtime"`
		Architectures []yaml.Node `yaml:"Architectures"`
	}
	if err := fn.Properties.Decode(&props); err != nil {
		t.Fatal(err)
	}
	if props.Runtime != "provided.al2023" || props.Handler != "bootstrap" {
		t.Errorf("Runtime %q, Handler %q; want provided.al2023 and bootstrap", props.Runtime, props.Handler)
	}

	// CodeUri is the function's package, not the module root.
	codeDir := filepath.Join(filepath.Dir(templatePath), filepath.FromSlash(props.CodeUri))
	if props.CodeUri == "" || filepath.Clean(codeDir) == filepath.Clean(filepath.Dir(templatePath)) {
		t.Fatalf("CodeUri %q is the repository's root; want the function's own folder", props.CodeUri)
	}
	pkg, err := build.ImportDir(codeDir, 0)
	if err != nil || pkg.Name != "main" {
		t.Fatalf("CodeUri %q: %v (package %q); want the function's main package", props.CodeUri, err, pkg.Name)
	}
	if here, _ := filepath.Abs("."); filepath.Clean(here) != filepath.Clean(mustAbs(t, codeDir)) {
		t.Errorf("CodeUri %q is not this package's folder, functions/payment", props.CodeUri)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(templatePath), "go.mod")); err != nil {
		t.Errorf("no go.mod above CodeUri: go build in CodeUri would find no module: %v", err)
	}

	// Architectures: the Architecture parameter, arm64 unless asked.
	if len(props.Architectures) != 1 || props.Architectures[0].Tag != "!Ref" || props.Architectures[0].Value != "Architecture" {
		t.Fatalf("Architectures %v; want [!Ref Architecture]", props.Architectures)
	}
	arch, ok := doc.Parameters["Architecture"]
	if !ok || arch.Default == nil || *arch.Default != "arm64" || !slices.Equal(arch.AllowedValues, []string{"arm64", "x86_64"}) {
		t.Fatalf("parameter Architecture %+v; want AllowedValues [arm64 x86_64] and Default arm64", arch)
	}

	if testing.Short() {
		t.Skip("-short: not building the bootstrap")
	}
	// What SAM's Go builder runs (aws-lambda-builders, go_modules/builder.py):
	// `go build -trimpath -o ARTIFACTS/bootstrap CODEURI` in CodeUri, with
	// GOOS=linux and GOARCH from the architecture (arm64 -> arm64), and the
	// rest of the environment as the shell has it; CGO_ENABLED=0 as the docs
	// and make deploy set it.
	out := filepath.Join(t.TempDir(), "bootstrap")
	abs := mustAbs(t, codeDir)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, abs)
	cmd.Dir = abs
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOFLAGS=") }),
		"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, msg)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Errorf("bootstrap is for %v; want EM_AARCH64 (arm64)", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("bootstrap is dynamically linked; want a static binary")
		}
	}
	info, err := buildinfo.ReadFile(out)
	if err != nil || info.Path != "github.com/lambdakit/lambdakit/functions/payment" {
		t.Errorf("bootstrap's main package: %v, %v; want github.com/lambdakit/lambdakit/functions/payment", info, err)
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// samconfig.toml builds without SAM's cache, which hashes only CodeUri
// (functions/payment) and so would miss a change to the library the
// function imports and deploy the old binary. Its [local-x86_64]
// environment builds and invokes the function for x86_64 (sam local invoke
// without QEMU on an x86-64 machine), in a build folder of its own that sam
// deploy does not read, and has no deploy settings; every Architecture it
// names is one the template allows.
func TestSamconfigBuilds(t *testing.T) {
	cfg := readSamconfig(t)
	doc := loadSAMDocument(t)
	allowed := doc.Parameters["Architecture"].AllowedValues
	builds := 0
	for table, kv := range cfg {
		if strings.HasSuffix(table, ".build.parameters") {
			builds++
			if kv["cached"] == "true" {
				t.Errorf("samconfig.toml [%s]: cached = true; want false: SAM's cache hashes only CodeUri", table)
			}
		}
		if a, ok := parameterOverrides(t, kv["parameter_overrides"])["Architecture"]; ok && !slices.Contains(allowed, a) {
			t.Errorf("samconfig.toml [%s]: Architecture %q; the template allows %v", table, a, allowed)
		}
	}
	if builds == 0 {
		t.Error("samconfig.toml has no build settings")
	}
	b, inv := cfg["local-x86_64.build.parameters"], cfg["local-x86_64.local_invoke.parameters"]
	if b == nil || inv == nil {
		t.Fatalf("samconfig.toml has no [local-x86_64.build.parameters] and [local-x86_64.local_invoke.parameters]")
	}
	for _, kv := range []map[string]string{b, inv} {
		if got := parameterOverrides(t, kv["parameter_overrides"])["Architecture"]; got != "x86_64" {
			t.Errorf("[local-x86_64] Architecture %q; want x86_64 for both build and local invoke", got)
		}
	}
	dir := filepath.ToSlash(filepath.Clean(b["build_dir"]))
	if dir == "." || dir == ".aws-sam/build" || !strings.HasPrefix(dir, ".aws-sam/") {
		t.Errorf("[local-x86_64] build_dir %q; want a folder of its own under .aws-sam/ (ignored by git), not .aws-sam/build, which sam deploy reads", b["build_dir"])
	}
	if got, want := inv["template_file"], dir+"/template.yaml"; got != want {
		t.Errorf("[local-x86_64] local invoke template_file %q; want %q, the x86_64 build", got, want)
	}
	if inv["env_vars"] != "events/env.json" {
		t.Errorf("[local-x86_64] env_vars %q; want events/env.json", inv["env_vars"])
	}
	for table := range cfg {
		if strings.HasPrefix(table, "local-x86_64.deploy") || table == "local-x86_64.global.parameters" {
			t.Errorf("samconfig.toml has [%s]; want no deploy settings for the x86_64 build", table)
		}
	}
}

// The backoff's settings restate what the template configures elsewhere,
// which the function cannot read from its event: its floor is the source
// queue's visibility timeout (QUEUE_VISIBILITY_TIMEOUT), and withBackoff's
// function timeout, batching window, maxReceiveCount and retention are the
// function's, its mapping's and the queue's. Changed on one side only, a
// floor below the queue's timeout would bring payments back sooner than
// the queue does, a cap too high would be refused by SQS, and the start-up
// warning would check the wrong totals.
func TestTemplateBackoffMatchesPaymentQueue(t *testing.T) {
	tpl := loadTemplate(t)
	fn := mapping(t, tpl.resources["PaymentFunction"].props)
	queueID := tpl.envQueue(t, "PaymentFunction", "SOURCE_QUEUE_URL")
	queue := mapping(t, tpl.resources[queueID].props)
	seconds := func(what string, n *yaml.Node) time.Duration {
		t.Helper()
		if n == nil {
			return 0
		}
		s, err := strconv.Atoi(n.Value)
		if err != nil {
			t.Fatalf("%s %q: want whole seconds", what, n.Value)
		}
		return time.Duration(s) * time.Second
	}
	vars := mapping(t, mapping(t, fn["Environment"])["Variables"])
	floor := seconds("QUEUE_VISIBILITY_TIMEOUT", vars["QUEUE_VISIBILITY_TIMEOUT"])
	var o lambdakit.BatchOptions
	withBackoff(nil, "https://sqs.us-east-1.amazonaws.com/1/q", floor)(&o)
	bo := o.Backoff
	var window time.Duration
	for _, ev := range mapping(t, fn["Events"]) {
		props := mapping(t, mapping(t, ev)["Properties"])
		if tpl.ref(t, props["Queue"]) == queueID {
			window = seconds("MaximumBatchingWindowInSeconds", props["MaximumBatchingWindowInSeconds"])
		}
	}
	for _, c := range []struct {
		name       string
		code, tmpl any
	}{
		{"Floor and " + queueID + "'s VisibilityTimeout", bo.Floor, seconds("VisibilityTimeout", queue["VisibilityTimeout"])},
		{"FunctionTimeout and the function's Timeout", bo.FunctionTimeout, seconds("Timeout", fn["Timeout"])},
		{"BatchingWindow and the mapping's MaximumBatchingWindowInSeconds", bo.BatchingWindow, window},
		{"MaxReceiveCount and the RedrivePolicy's maxReceiveCount", strconv.Itoa(bo.MaxReceiveCount), mapping(t, queue["RedrivePolicy"])["maxReceiveCount"].Value},
		{"Retention and MessageRetentionPeriod", bo.Retention, seconds("MessageRetentionPeriod", queue["MessageRetentionPeriod"])},
	} {
		if c.code != c.tmpl {
			t.Errorf("%s differ: %v on the backoff, %v in template.yaml", c.name, c.code, c.tmpl)
		}
	}
}

// Every stream mapping gives a failing record up while the stream still
// holds it. AWS ("Retaining discarded records for a DynamoDB event source
// in Lambda", services-dynamodb-errors): a batch Lambda cannot invoke the
// function with (throttling and the like) is retried until its records
// expire or pass MaximumRecordAgeInSeconds, whatever
// MaximumRetryAttempts says; the default age, -1, means until they expire
// ("Lambda parameters for Amazon DynamoDB event source mappings",
// services-ddb-params), and DynamoDB Streams keeps a record 24 hours. So
// without an age a throttled relay holds its shard back for a day, and
// what it then gives up on is being trimmed: the on-failure message has
// only shard and sequence numbers, and the records they name, the only
// way to tell which payments' events were never sent, are gone. The age
// leaves at least half the retention to read them after the alarm.
func TestTemplateStreamMappingsGiveUpWhileRecordsAreReadable(t *testing.T) {
	const streamRetention = 24 * time.Hour // DynamoDB Streams' data retention
	tpl := loadTemplate(t)
	mappings := 0
	for _, fn := range tpl.resourcesOf("AWS::Serverless::Function") {
		for name, e := range mapping(t, mapping(t, tpl.resources[fn].props)["Events"]) {
			ev := mapping(t, e)
			if ev["Type"].Value != "DynamoDB" {
				continue
			}
			mappings++
			p := mapping(t, ev["Properties"])
			number := func(key string) (int, bool) {
				if p[key] == nil {
					return 0, false
				}
				n, err := strconv.Atoi(p[key].Value)
				if err != nil {
					t.Fatalf("%s's event %s: %s %q: want a literal number", fn, name, key, p[key].Value)
				}
				return n, true
			}
			if age, ok := number("MaximumRecordAgeInSeconds"); !ok || age < 60 || time.Duration(age)*time.Second > streamRetention/2 {
				t.Errorf("%s's event %s: MaximumRecordAgeInSeconds %v (set %v); want 60 to %d s, so that a throttled batch is given up while its records are still in the stream",
					fn, name, age, ok, int(streamRetention/2/time.Second))
			}
			if retries, ok := number("MaximumRetryAttempts"); !ok || retries < 0 {
				t.Errorf("%s's event %s: MaximumRetryAttempts %v (set %v); want a bound, not -1", fn, name, retries, ok)
			}
			if p["DestinationConfig"] == nil {
				t.Errorf("%s's event %s has no DestinationConfig; want an on-failure queue for what it gives up", fn, name)
			}
		}
	}
	if mappings == 0 {
		t.Error("no DynamoDB event in the template; want the relay's")
	}
}
