// Package lambdakitotel traces a lambdakit function with OpenTelemetry: one
// span per invocation (WrapBatch), one per record (Middleware) and one per
// idempotency store request (WrapStore).
//
// It is a package of its own so that a function that does not trace links
// none of OpenTelemetry: lambdakit, dynamostore and the sample import
// nothing from it. It uses the OpenTelemetry API only; the TracerProvider,
// and with it the SDK, the sampler and the exporter, is the caller's
// choice (Options.TracerProvider, by default the global one).
//
// The three wrappers nest through the context:
//
//	ddb, err := dynamostore.New(db, table)
//	if err != nil {
//		log.Fatal(err)
//	}
//	store := lambdakitotel.WrapStore(ddb)
//	h := lambdakit.Chain(charge,
//		lambdakitotel.Middleware(),                // outside Idempotent: sees duplicates
//		lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id")))
//	lambda.Start(lambdakitotel.WrapBatch(lambdakit.Batch(h)))
//
// The invocation span ("process <queue>", kind CONSUMER) is the parent of
// the record spans (the same name and kind, as the OpenTelemetry
// conventions for Lambda functions triggered by SQS have them), and each
// record span the parent of its store spans ("lambdakit.store.acquire",
// "…complete", "…release", "…get_records", and "…commit" and
// "…mark_effect" under Options.StagedOnly and Options.StoreEffect). A
// record span carries the idempotency outcome (OutcomeKey: processed, duplicate or failed, with
// ReasonKey naming why it failed, in the words of the batch's log lines and
// metrics); a store span carries the record's ID, which is the prefix and a
// SHA-256 of the key, never the key itself: under lambdakit's
// Options.ReadableIDs, whose IDs hold the key, the span carries the ID
// the record would have without them.
//
// The store WrapStore returns is a lambdakit.StoreWrapper: everything the
// wrapped store can do beyond lambdakit.Store (write the handler's item,
// check what it stages against DynamoDB's limits before its work, commit
// in one request, keep an effect, limit the length of a record ID) works
// through it as on the store itself.
//
// Records the batch never ran (not started before the deadline, or skipped
// after an earlier failure in their FIFO group) have no record span; the
// invocation span counts them among the failed.
package lambdakitotel
