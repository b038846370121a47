package lambdakit

import "unsafe"

// bytesOf returns the bytes of s without copying them, for reading only:
// every record's body is scanned and hashed, and copying it for that would
// be the largest allocation on the idempotent path. Callers must neither
// write to the slice nor keep it past the string's use.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// stringOf returns b as a string without copying it. The caller must never
// change b afterwards: for buffers made for one result and then handed
// over, such as a canonical payload.
func stringOf(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
