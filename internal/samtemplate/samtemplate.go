// Package samtemplate reads the DynamoDB tables, SQS queues, SQS events and
// function settings that template.yaml declares, so that local runs and tests
// create exactly those tables and queues, run the function as it is
// configured, and never drift from what SAM deploys.
package samtemplate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"gopkg.in/yaml.v3"
)

// document is what the package reads of a template: its resources, each
// one's properties kept as YAML, whose CloudFormation tags (!Ref, !GetAtt
// ...) plain decoding would refuse, and the functions' globals.
type document struct {
	Globals struct {
		Function yaml.Node `yaml:"Function"`
	} `yaml:"Globals"`
	Resources map[string]Resource `yaml:"Resources"`
}

// Resource is one resource of a template as written: its type, and its
// properties as YAML, CloudFormation's tags (!Ref, !GetAtt ...) kept.
type Resource struct {
	Type       string    `yaml:"Type"`
	Properties yaml.Node `yaml:"Properties"`
}

// Resources returns the resources of the SAM template at path by logical
// ID, for what the typed readers (Tables, Queues, Functions ...) leave out.
func Resources(path string) (map[string]Resource, error) {
	doc, err := read(path)
	if err != nil {
		return nil, err
	}
	return doc.Resources, nil
}

// read reads the template at path.
func read(path string) (*document, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc document
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("samtemplate: %s: %w", path, err)
	}
	return &doc, nil
}

// resource is one resource of a template, its properties decoded into a P.
type resource[P any] struct {
	id string
	p  P
}

// decodeAll reads the template at path and decodes the properties of each
// resource of type typ into a P, in the order of their logical IDs; kind
// names such a resource in errors ("queue").
func decodeAll[P any](path, typ, kind string) ([]resource[P], *document, error) {
	doc, err := read(path)
	if err != nil {
		return nil, nil, err
	}
	var out []resource[P]
	for _, id := range slices.Sorted(maps.Keys(doc.Resources)) {
		r := doc.Resources[id]
		if r.Type != typ {
			continue
		}
		var p P
		if err := r.Properties.Decode(&p); err != nil {
			return nil, nil, fmt.Errorf("samtemplate: %s: %s %s: %w", path, kind, id, err)
		}
		out = append(out, resource[P]{id, p})
	}
	return out, doc, nil
}

// readAll reads the template at path and makes a T of each resource of type
// typ, from its logical ID and its properties decoded into a P, in the
// order of their logical IDs; kind names such a resource in errors.
func readAll[P, T any](path, typ, kind string, makeT func(id string, p P, doc *document) (T, error)) ([]T, error) {
	res, doc, err := decodeAll[P](path, typ, kind)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(res))
	for _, r := range res {
		t, err := makeT(r.id, r.p, doc)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Table is one AWS::DynamoDB::Table resource of the template.
type Table struct {
	LogicalID            string
	AttributeDefinitions []struct {
		AttributeName string `yaml:"AttributeName"`
		AttributeType string `yaml:"AttributeType"`
	} `yaml:"AttributeDefinitions"`
	KeySchema []struct {
		AttributeName string `yaml:"AttributeName"`
		KeyType       string `yaml:"KeyType"`
	} `yaml:"KeySchema"`
	BillingMode             string `yaml:"BillingMode"`
	TimeToLiveSpecification *struct {
		AttributeName string `yaml:"AttributeName"`
		Enabled       bool   `yaml:"Enabled"`
	} `yaml:"TimeToLiveSpecification"`
	StreamSpecification *struct {
		StreamViewType string `yaml:"StreamViewType"`
	} `yaml:"StreamSpecification"`
}

// Tables returns the tables declared in the SAM template at path, sorted by
// logical ID. Only the properties that shape the data are read; a table
// whose key schema is not literal YAML is an error.
func Tables(path string) ([]Table, error) {
	return readAll(path, "AWS::DynamoDB::Table", "table", func(id string, t Table, _ *document) (Table, error) {
		t.LogicalID = id
		if len(t.KeySchema) == 0 || len(t.AttributeDefinitions) == 0 {
			return t, fmt.Errorf("samtemplate: %s: table %s has no literal KeySchema and AttributeDefinitions", path, id)
		}
		return t, nil
	})
}

// Find returns the table with the given logical ID.
func Find(tables []Table, logicalID string) (Table, error) {
	return find(tables, "table", logicalID, func(t Table) string { return t.LogicalID })
}

// find returns the item of the given kind ("table") with the logical ID.
func find[T any](items []T, kind, logicalID string, id func(T) string) (T, error) {
	for _, it := range items {
		if id(it) == logicalID {
			return it, nil
		}
	}
	var zero T
	return zero, fmt.Errorf("samtemplate: no %s %s in the template", kind, logicalID)
}

// API is the part of the DynamoDB client Create uses.
type API interface {
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// Create creates t under the physical name, with its TTL and stream. A table that
// already exists is left as it is, so a local run can be repeated.
func (t Table) Create(ctx context.Context, db API, name string) error {
	in := &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: types.BillingMode(t.BillingMode)}
	if in.BillingMode == "" {
		in.BillingMode = types.BillingModePayPerRequest
	}
	for _, a := range t.AttributeDefinitions {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(a.AttributeName), AttributeType: types.ScalarAttributeType(a.AttributeType)})
	}
	for _, k := range t.KeySchema {
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{
			AttributeName: aws.String(k.AttributeName), KeyType: types.KeyType(k.KeyType)})
	}
	if st := t.StreamSpecification; st != nil {
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewType(st.StreamViewType)}
	}
	if _, err := db.CreateTable(ctx, in); err != nil {
		if inUse := (*types.ResourceInUseException)(nil); errors.As(err, &inUse) {
			return nil
		}
		return fmt.Errorf("samtemplate: create %s (%s): %w", name, t.LogicalID, err)
	}
	if ttl := t.TimeToLiveSpecification; ttl != nil && ttl.Enabled {
		_, err := db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName: aws.String(name),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{
				AttributeName: aws.String(ttl.AttributeName), Enabled: aws.Bool(true)},
		})
		if err != nil {
			return fmt.Errorf("samtemplate: enable TTL on %s: %w", name, err)
		}
	}
	return nil
}
