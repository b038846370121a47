package samtemplate

import (
	"fmt"
	"maps"
	"slices"
)

// EventFilter is the FilterCriteria of one event of an
// AWS::Serverless::Function: the patterns of the event source mapping SAM
// creates for it, which Lambda matches each record against.
type EventFilter struct {
	// Function is the function's logical ID, Name the event's, Type the
	// event's type (SQS, DynamoDB, Kinesis).
	Function, Name, Type string
	// Patterns are the event's FilterCriteria.Filters' patterns, in
	// order; none when it has no FilterCriteria.
	Patterns []string
}

// EventFilters returns the FilterCriteria of the SQS, DynamoDB and
// Kinesis events of the template's serverless functions, sorted by
// function and event name. A pattern must be a literal string, as Lambda
// takes it.
func EventFilters(path string) ([]EventFilter, error) {
	type properties struct {
		Events map[string]struct {
			Type       string `yaml:"Type"`
			Properties struct {
				FilterCriteria struct {
					Filters []struct {
						Pattern string `yaml:"Pattern"`
					} `yaml:"Filters"`
				} `yaml:"FilterCriteria"`
			} `yaml:"Properties"`
		} `yaml:"Events"`
	}
	res, _, err := decodeAll[properties](path, "AWS::Serverless::Function", "function")
	if err != nil {
		return nil, err
	}
	var out []EventFilter
	for _, r := range res {
		for _, name := range slices.Sorted(maps.Keys(r.p.Events)) {
			ev := r.p.Events[name]
			switch ev.Type {
			case "SQS", "DynamoDB", "Kinesis":
			default:
				continue
			}
			f := EventFilter{Function: r.id, Name: name, Type: ev.Type}
			for i, p := range ev.Properties.FilterCriteria.Filters {
				if p.Pattern == "" {
					return nil, fmt.Errorf("samtemplate: %s: function %s: event %s: filter %d: want a literal Pattern", path, r.id, name, i)
				}
				f.Patterns = append(f.Patterns, p.Pattern)
			}
			out = append(out, f)
		}
	}
	return out, nil
}
