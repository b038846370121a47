package lambdakit

// recordStack is how much stack the goroutine of a record gets before it
// runs the handler. A goroutine starts with a small stack and doubles it
// each time a call does not fit, copying every frame it holds: a record's
// path through the middleware, the store and the AWS SDK is deep, so its
// goroutine would grow several times, each time with more frames to copy:
// 39 % of the CPU of a batch of new records on the in-memory store
// (BenchmarkBatch10NewKeysNoMetrics), 2 to 3 % of the sample's bootstrap
// against moto. Growing once, at the goroutine's first frame, copies
// almost nothing; the runtime keeps stacks of up to 16 KB in per-P caches,
// so the larger stack comes back to the next record cheaply.
const recordStack = 12 << 10

// stackIndex is read by growStack so that the compiler cannot drop its
// frame: it does not know which byte is read.
var stackIndex = 0

// growStack grows the calling goroutine's stack to hold recordStack
// bytes more than it uses now (the runtime rounds up to a power of two:
// 16 KB at a goroutine's start).
//
//go:noinline
func growStack() byte {
	var buf [recordStack]byte
	return buf[stackIndex]
}
