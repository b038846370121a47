package samtemplate

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"gopkg.in/yaml.v3"
)

// Queue is one AWS::SQS::Queue resource of the template: the properties that
// decide how messages flow, which a local queue copies. A caller that scales
// the timings down for a test or a demo changes the fields of its copy
// before Create.
type Queue struct {
	LogicalID                 string
	FifoQueue                 bool
	ContentBasedDeduplication bool
	// VisibilityTimeout is in seconds; 0 when the template leaves SQS's
	// default.
	VisibilityTimeout int
	// DeadLetterQueue is the logical ID of the queue that RedrivePolicy's
	// deadLetterTargetArn names (!GetAtt ID.Arn), and MaxReceiveCount its
	// maxReceiveCount; empty and 0 without a redrive policy.
	DeadLetterQueue string
	MaxReceiveCount int
}

// SQSEvent is an SQS event of an AWS::Serverless::Function: the event
// source mapping SAM creates, with the function's timeout.
type SQSEvent struct {
	// Function is the function's logical ID, Name the event's.
	Function, Name string
	// Queue is the logical ID of the queue (!GetAtt ID.Arn).
	Queue string
	// BatchSize is 0 when the template leaves Lambda's default.
	BatchSize int
	// MaximumConcurrency is ScalingConfig's; 0 when absent.
	MaximumConcurrency int
	// ReportBatchItemFailures is whether FunctionResponseTypes lists it.
	ReportBatchItemFailures bool
	// Timeout is the function's timeout in seconds (its own, else the
	// template's Globals.Function's); 0 when the template leaves Lambda's
	// default.
	Timeout int
}

// getAttArn returns ID for a node "!GetAtt ID.Arn" (or the list form), and
// "" for anything else.
func getAttArn(n *yaml.Node) string {
	switch {
	case n == nil || n.Tag != "!GetAtt":
		return ""
	case n.Kind == yaml.ScalarNode:
		id, ok := strings.CutSuffix(n.Value, ".Arn")
		if ok {
			return id
		}
	case n.Kind == yaml.SequenceNode && len(n.Content) == 2 && n.Content[1].Value == "Arn":
		return n.Content[0].Value
	}
	return ""
}

// Queues returns the queues declared in the SAM template at path, sorted by
// logical ID. A redrive policy must name its dead-letter queue with
// !GetAtt ID.Arn and give a literal maxReceiveCount.
func Queues(path string) ([]Queue, error) {
	type properties struct {
		FifoQueue                 bool `yaml:"FifoQueue"`
		ContentBasedDeduplication bool `yaml:"ContentBasedDeduplication"`
		VisibilityTimeout         int  `yaml:"VisibilityTimeout"`
		RedrivePolicy             *struct {
			DeadLetterTargetArn yaml.Node `yaml:"deadLetterTargetArn"`
			MaxReceiveCount     int       `yaml:"maxReceiveCount"`
		} `yaml:"RedrivePolicy"`
	}
	return readAll(path, "AWS::SQS::Queue", "queue", func(id string, p properties, _ *document) (Queue, error) {
		q := Queue{LogicalID: id, FifoQueue: p.FifoQueue, ContentBasedDeduplication: p.ContentBasedDeduplication, VisibilityTimeout: p.VisibilityTimeout}
		if rp := p.RedrivePolicy; rp != nil {
			q.DeadLetterQueue, q.MaxReceiveCount = getAttArn(&rp.DeadLetterTargetArn), rp.MaxReceiveCount
			if q.DeadLetterQueue == "" || q.MaxReceiveCount < 1 {
				return q, fmt.Errorf("samtemplate: %s: queue %s: want a RedrivePolicy with deadLetterTargetArn: !GetAtt ID.Arn and a literal maxReceiveCount", path, id)
			}
		}
		return q, nil
	})
}

// FindQueue returns the queue with the given logical ID.
func FindQueue(queues []Queue, logicalID string) (Queue, error) {
	return find(queues, "queue", logicalID, func(q Queue) string { return q.LogicalID })
}

// SQSEvents returns the SQS events of the template's serverless functions,
// sorted by function and event name.
func SQSEvents(path string) ([]SQSEvent, error) {
	type properties struct {
		functionProperties `yaml:",inline"`
		Events             map[string]struct {
			Type       string `yaml:"Type"`
			Properties struct {
				Queue                 yaml.Node `yaml:"Queue"`
				BatchSize             int       `yaml:"BatchSize"`
				FunctionResponseTypes []string  `yaml:"FunctionResponseTypes"`
				ScalingConfig         struct {
					MaximumConcurrency int `yaml:"MaximumConcurrency"`
				} `yaml:"ScalingConfig"`
			} `yaml:"Properties"`
		} `yaml:"Events"`
	}
	res, doc, err := decodeAll[properties](path, "AWS::Serverless::Function", "function")
	if err != nil {
		return nil, err
	}
	globals, err := doc.functionGlobals(path)
	if err != nil {
		return nil, err
	}
	var out []SQSEvent
	for _, r := range res {
		timeout := r.p.functionProperties.over(globals).Timeout
		for _, name := range slices.Sorted(maps.Keys(r.p.Events)) {
			ev := r.p.Events[name]
			if ev.Type != "SQS" {
				continue
			}
			e := SQSEvent{Function: r.id, Name: name, Queue: getAttArn(&ev.Properties.Queue), BatchSize: ev.Properties.BatchSize,
				MaximumConcurrency: ev.Properties.ScalingConfig.MaximumConcurrency, Timeout: timeout}
			e.ReportBatchItemFailures = slices.Contains(ev.Properties.FunctionResponseTypes, "ReportBatchItemFailures")
			if e.Queue == "" {
				return nil, fmt.Errorf("samtemplate: %s: function %s: event %s: want Queue: !GetAtt ID.Arn", path, r.id, name)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// SQSAPI is the part of the SQS client CreateQueue uses.
type SQSAPI interface {
	CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
}

// Attributes returns the queue's attributes for CreateQueue; dlqARN is the
// ARN of the queue standing for DeadLetterQueue, unused without one.
func (q Queue) Attributes(dlqARN string) map[string]string {
	attrs := map[string]string{}
	if q.FifoQueue {
		attrs["FifoQueue"] = "true"
		attrs["ContentBasedDeduplication"] = strconv.FormatBool(q.ContentBasedDeduplication)
	}
	if q.VisibilityTimeout > 0 {
		attrs["VisibilityTimeout"] = strconv.Itoa(q.VisibilityTimeout)
	}
	if q.DeadLetterQueue != "" {
		policy, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dlqARN, "maxReceiveCount": strconv.Itoa(q.MaxReceiveCount)})
		attrs["RedrivePolicy"] = string(policy)
	}
	return attrs
}

// Create creates q under the physical name (which must end in ".fifo" for a
// FIFO queue) and returns its URL. dlqARN is the ARN of the queue standing
// for DeadLetterQueue; create that one first. Creating a queue again with
// the same attributes returns the existing one.
func (q Queue) Create(ctx context.Context, client SQSAPI, name, dlqARN string) (string, error) {
	if q.DeadLetterQueue != "" && dlqARN == "" {
		return "", fmt.Errorf("samtemplate: create %s (%s): needs the ARN of its dead-letter queue %s", name, q.LogicalID, q.DeadLetterQueue)
	}
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: q.Attributes(dlqARN)})
	if err != nil {
		return "", fmt.Errorf("samtemplate: create %s (%s): %w", name, q.LogicalID, err)
	}
	return aws.ToString(out.QueueUrl), nil
}
