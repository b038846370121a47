package lambdakit

// protect calls fn, and stops a panic in it, which it returns as a
// *PanicError with the stack where fn panicked: code that calls out (to a
// handler, a store, a predicate or a sender of the user's) fails only its
// own record or call, instead of crashing the whole invocation.
//
// runtime.Goexit (t.FailNow in a test, for one) is no panic: no recover
// stops it, and it unwinds the goroutine past protect's caller, which
// never sees protect return. onGoexit, if not nil, runs then, as the
// goroutine unwinds, so that the caller can leave its state settled. A
// panic raised while Goexit unwinds fn is recovered, but the goroutine
// still exits: onGoexit runs then too.
func protect(fn func(), onGoexit func()) (pe *PanicError) {
	returned := false
	defer func() {
		if !returned && onGoexit != nil {
			onGoexit()
		}
	}()
	func() {
		defer func() {
			if p := recover(); p != nil {
				pe = newPanicError(p)
			}
		}()
		fn()
	}()
	// The call above recovers every panic: only Goexit skips this.
	returned = true
	return pe
}
