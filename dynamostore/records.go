package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// RecordsAPI is the part of the DynamoDB client that Records uses.
// *dynamodb.Client satisfies it.
type RecordsAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Errors of Records.
var (
	// ErrNoTable means the table does not exist (in the client's region
	// and account, or at its endpoint).
	ErrNoTable = errors.New("dynamostore: table not found")
	// ErrNotFound means there is no record with the ID.
	ErrNotFound = errors.New("dynamostore: no such record")
	// ErrRecordChanged means Delete found the record changed since it was
	// read (another status or lease), and left it.
	ErrRecordChanged = errors.New("dynamostore: record changed since it was read")
)

// StatusError is an item whose status attribute holds no record status
// (neither INPROGRESS nor COMPLETED): not an idempotency record, or one
// read with the wrong Options.StatusAttr, such as a ledger row whose own
// status is CHARGED. Get returns it rather than guess what the item
// means, and Delete never deletes such an item.
type StatusError struct {
	ID     string
	Attr   string // the attribute read as the status: Options.StatusAttr
	Status string // what it holds ("" when absent)
}

// Error names the item, the attribute and what it holds.
func (e *StatusError) Error() string {
	return fmt.Sprintf("dynamostore: item %s: attribute %q holds %q, which is no record status (%s or %s)",
		e.ID, e.Attr, e.Status, lambdakit.StatusInProgress, lambdakit.StatusCompleted)
}

// checkStatus returns a *StatusError when rec's status is no record
// status.
func (r *Records) checkStatus(rec lambdakit.IdempotencyRecord) error {
	if rec.Status == lambdakit.StatusInProgress || rec.Status == lambdakit.StatusCompleted {
		return nil
	}
	return &StatusError{ID: rec.ID, Attr: r.o.StatusAttr, Status: string(rec.Status)}
}

// Records reads and deletes the records of a table for an operator: a
// command-line tool, not a function. Store is what functions use; they need
// none of this, and their roles need not allow it (dynamodb:GetItem,
// dynamodb:Scan, or dynamodb:Query on a composite-key table,
// dynamodb:DeleteItem).
//
// Items are read with the same decoding as Store's, and Options names their
// attributes as for Store.
type Records struct {
	client RecordsAPI
	table  string
	o      Options
	optErr error
	codec  *Store // decodes items and names attributes, as the Store of the table does
}

// NewRecords returns Records for table through client. Options with two
// attributes of the same name make every method return an error.
func NewRecords(client RecordsAPI, table string, optFns ...func(*Options)) *Records {
	o, err := newOptions(optFns)
	return &Records{client: client, table: table, o: o, optErr: err, codec: newStore(nil, table, o)}
}

// Get reads the record with the given ID, with a strongly consistent read.
// It returns an error wrapping ErrNotFound when there is none, and one
// wrapping ErrNoTable when the table does not exist, and a *StatusError
// when the item's status is no record status. An expired record that
// DynamoDB has not deleted yet is returned as it is: see lambdakit.IdempotencyRecord.Live.
func (r *Records) Get(ctx context.Context, id string) (lambdakit.IdempotencyRecord, error) {
	if r.optErr != nil {
		return lambdakit.IdempotencyRecord{}, r.optErr
	}
	out, err := r.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(r.table),
		Key:            r.o.key(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return lambdakit.IdempotencyRecord{}, r.fail("get "+id, err)
	}
	if len(out.Item) == 0 {
		return lambdakit.IdempotencyRecord{}, fmt.Errorf("dynamostore: get %s: %w", id, ErrNotFound)
	}
	rec, err := r.codec.decode(out.Item)
	if err != nil {
		return lambdakit.IdempotencyRecord{}, fmt.Errorf("dynamostore: get %s: %w", id, err)
	}
	if err := r.checkStatus(rec); err != nil {
		return lambdakit.IdempotencyRecord{}, err
	}
	return rec, nil
}

// Delete deletes rec's record, provided it is still as read: same status,
// same lease (none, for a record without one). Otherwise it deletes nothing
// and returns an error wrapping ErrRecordChanged, or ErrNotFound when the
// record is gone. A record deleted this way is forgotten: the next message
// with its key runs the handler again. A rec whose status is no record
// status is a *StatusError, before any call: the condition on the status
// then keeps Delete off every item that is not a record.
func (r *Records) Delete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if r.optErr != nil {
		return r.optErr
	}
	if err := r.checkStatus(rec); err != nil {
		return err
	}
	cond := "attribute_exists(" + nKey + ") AND " + nStatus + " = :status AND "
	values := map[string]types.AttributeValue{":status": str(string(rec.Status))}
	if rec.Lease == "" {
		cond += "attribute_not_exists(" + nLease + ")"
	} else {
		cond += nLease + " = :lease"
		values[":lease"] = str(rec.Lease)
	}
	_, err := r.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                           aws.String(r.table),
		Key:                                 r.o.key(rec.ID),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            r.codec.attrNames(nKey, nStatus, nLease),
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &failed) && len(failed.Item) == 0:
		return fmt.Errorf("dynamostore: delete %s: %w", rec.ID, ErrNotFound)
	case errors.As(err, &failed):
		return fmt.Errorf("dynamostore: delete %s: %w", rec.ID, ErrRecordChanged)
	default:
		return r.fail("delete "+rec.ID, err)
	}
}

// ScanFilter selects the records Scan returns.
type ScanFilter struct {
	// Prefix keeps the records whose IDs are "<Prefix>#...". Required.
	Prefix string
	// InProgress keeps only records in progress.
	InProgress bool
	// LeaseEndedBefore, if not zero, keeps only records whose lease ended
	// before it (in_progress_expiration earlier than it).
	LeaseEndedBefore time.Time
	// Failed keeps only records completed with a failure
	// (lambdakit.IdempotencyRecord.Failure): the work ran, and every
	// message with the key fails without running it again.
	Failed bool
}

// Scan returns the records that match f, page after page. On a table keyed
// by the record ID alone it is a Scan with a filter: it reads the whole
// table (and is billed for all of it), which suits an operator's
// occasional look, not a function. On a composite-key table
// (Options.SortKeyAttr) it is a Query of the function's partition
// (StaticPartitionKey) for the IDs that begin with the prefix: it reads
// the function's records only, not those of the other functions that share
// the table. An error ends the sequence; an empty Prefix is an error.
func (r *Records) Scan(ctx context.Context, f ScanFilter) iter.Seq2[lambdakit.IdempotencyRecord, error] {
	return func(yield func(lambdakit.IdempotencyRecord, error) bool) {
		if r.optErr != nil {
			yield(lambdakit.IdempotencyRecord{}, r.optErr)
			return
		}
		if f.Prefix == "" {
			yield(lambdakit.IdempotencyRecord{}, errors.New("dynamostore: scan: empty prefix"))
			return
		}
		page := r.pages(f)
		var start map[string]types.AttributeValue
		for {
			items, next, err := page(ctx, start)
			if err != nil {
				yield(lambdakit.IdempotencyRecord{}, err)
				return
			}
			for _, item := range items {
				rec, err := r.codec.decode(item)
				if err != nil {
					err = fmt.Errorf("dynamostore: scan: %w", err)
				}
				if !yield(rec, err) || err != nil {
					return
				}
			}
			if len(next) == 0 {
				return
			}
			start = next
		}
	}
}

// pageFunc reads the page of records that starts after the key start (the
// first page for nil), and returns its items and the key to start the
// next one after (none after the last page).
type pageFunc func(ctx context.Context, start map[string]types.AttributeValue) (items []map[string]types.AttributeValue, next map[string]types.AttributeValue, err error)

// pages returns the request that reads the records f selects, a page at a
// time: a Query of the function's partition on a composite-key table, a
// Scan of the whole table otherwise.
func (r *Records) pages(f ScanFilter) pageFunc {
	// The conditions on the record, which DynamoDB applies to the items
	// it reads.
	var conds []string
	names := []string{nKey}
	values := map[string]types.AttributeValue{":prefix": str(f.Prefix + "#")}
	if f.InProgress {
		conds = append(conds, nStatus+" = :inprogress")
		names = append(names, nStatus)
		values[":inprogress"] = str(string(lambdakit.StatusInProgress))
	}
	if f.Failed {
		conds = append(conds, nStatus+" = :completed AND attribute_exists("+nFailure+")")
		names = append(names, nStatus, nFailure)
		values[":completed"] = str(string(lambdakit.StatusCompleted))
	}
	if !f.LeaseEndedBefore.IsZero() {
		conds = append(conds, nInProgress+" < :before_ms")
		names = append(names, nInProgress)
		values[":before_ms"] = num(f.LeaseEndedBefore.UnixMilli())
	}
	if r.o.SortKeyAttr == "" {
		conds = append([]string{"begins_with(" + nKey + ", :prefix)"}, conds...)
		in := &dynamodb.ScanInput{
			TableName:                 aws.String(r.table),
			FilterExpression:          aws.String(strings.Join(conds, " AND ")),
			ExpressionAttributeNames:  r.codec.attrNames(names...),
			ExpressionAttributeValues: values,
		}
		return func(ctx context.Context, start map[string]types.AttributeValue) ([]map[string]types.AttributeValue, map[string]types.AttributeValue, error) {
			in.ExclusiveStartKey = start
			out, err := r.client.Scan(ctx, in)
			if err != nil {
				return nil, nil, r.fail("scan", err)
			}
			return out.Items, out.LastEvaluatedKey, nil
		}
	}
	// The function's records, those of its partition key value, and no
	// other function's (Powertools' too) that share the table.
	names = append(names, nSortKey)
	values[":pk"] = str(r.o.StaticPartitionKey)
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(r.table),
		KeyConditionExpression:    aws.String(nKey + " = :pk AND begins_with(" + nSortKey + ", :prefix)"),
		ExpressionAttributeNames:  r.codec.attrNames(names...),
		ExpressionAttributeValues: values,
	}
	if len(conds) > 0 {
		in.FilterExpression = aws.String(strings.Join(conds, " AND "))
	}
	return func(ctx context.Context, start map[string]types.AttributeValue) ([]map[string]types.AttributeValue, map[string]types.AttributeValue, error) {
		in.ExclusiveStartKey = start
		out, err := r.client.Query(ctx, in)
		if err != nil {
			return nil, nil, r.fail("query", err)
		}
		return out.Items, out.LastEvaluatedKey, nil
	}
}

// HasPrefix reports whether any record's ID is "<prefix>#...". It reads as
// Scan does until it finds one: when there is none, the whole table, or on
// a composite-key table the function's partition.
func (r *Records) HasPrefix(ctx context.Context, prefix string) (bool, error) {
	for _, err := range r.Scan(ctx, ScanFilter{Prefix: prefix}) {
		return err == nil, err
	}
	return false, nil
}

// fail wraps a client error, as ErrNoTable when the table does not exist.
func (r *Records) fail(op string, err error) error {
	var missing *types.ResourceNotFoundException
	if errors.As(err, &missing) {
		return fmt.Errorf("dynamostore: %s: %w %q: %w", op, ErrNoTable, r.table, err)
	}
	return fmt.Errorf("dynamostore: %s: %w", op, err)
}
