package lambdakit

// recordStack is how much stack the goroutine of a record gets before it
// runs the handler. A goroutine starts with a small stack and doubles it
// each time a call does not fit, copying every frame it holds: a record's
// path through the middleware, the store and the AWS SDK is deep, so its
// goroutine would grow several times, each time with more frames to copy:
// 39 % of the CPU of a batch of new records on the in-memory store
// (BenchmarkBatch10NewKeysNoMetrics), 2 to 3 % of the sample's bootstrap
// against moto. Growing once, at the goroutine's first frame, copies
// almost nothing. The runtime rounds this up to 32 KB (stacks are powers
// of two), which holds more of the sample's path on a real SDK client than
// 16 KB did: perf on the sample's bootstrap against moto counted stack
// growth in 1.2 % of its samples at 16 KB, 0.5 % to 1.0 % in three
// windows at 32 KB (docs/performance.md, "One check of the item"). Stacks
// of 32 KB are not kept in the runtime's per-P caches, as stacks up to
// 16 KB are; taking and freeing one showed in under 0.2 % of the samples.
const recordStack = 20 << 10

// stackIndex is read by growStack so that the compiler cannot drop its
// frame: it does not know which byte is read.
var stackIndex = 0

// growStack grows the calling goroutine's stack to hold recordStack
// bytes more than it uses now (the runtime rounds up to a power of two:
// 32 KB at a goroutine's start).
//
//go:noinline
func growStack() byte {
	var buf [recordStack]byte
	return buf[stackIndex]
}
