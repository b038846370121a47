// Package eventfilter matches records against the filter patterns of a
// Lambda event source mapping (its FilterCriteria), as Lambda documents
// them in "Control which events Lambda sends to your function"
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html).
//
// A Filter holds up to MaxFilters patterns; a record passes when any one
// of them matches (OR across filters). A pattern is a JSON object whose
// keys name the record's fields, nested objects name nested fields, and
// each leaf is an array of rules, any one of which must match (OR within
// a field), every field of the pattern having to match (AND across
// fields). The rules are those of Lambda's filter rule syntax: a string, a
// number, true, false, null (the field is JSON null), "" (the field is an
// empty string), and the objects equals-ignore-case, prefix, suffix,
// anything-but (a string, a number, or a list of them), numeric (=, or a
// range of one lower and one upper bound) and exists. "$or" takes a list of
// patterns, any one of which must match.
//
// Records are matched as Lambda's engine, AWS's event-ruler, matches them:
// a record is the values at its leaves (strings, numbers, booleans,
// nulls), each at the path of names that leads to it; arrays, nested or
// not, add no name, so a field matches when any of its elements does, and
// the fields of one pattern matched inside an array of objects must all
// come from the same element. exists looks at leaves only: a field that
// is an object or an empty array does not exist. anything-but matches any
// leaf it does not list, null and booleans included.
//
// A record's payload (an SQS message's body, a Kinesis record's decoded
// data) is given as a Payload: a pattern that is an object at its key
// matches it only when the payload is a JSON object (a payload that is not
// JSON is dropped, as Lambda drops it), and rules at its key compare the
// payload as a plain string.
//
// Anything else (EventBridge's wildcard, cidr, prefix or suffix with
// equals-ignore-case, anything-but of a prefix, an empty rule list) is
// refused by New with an error that is ErrUnsupported, rather than matched
// some other way than Lambda would.
package eventfilter
