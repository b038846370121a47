package dynamostore

import (
	"testing"
	"time"
)

// The wait before retry n is random, up to min(max, base × 2^n), never
// negative, for any n the SDK may pass.
func TestJitterBackoffStaysWithinItsCeiling(t *testing.T) {
	j := jitterBackoff{base: DefaultBaseBackoff, max: DefaultMaxBackoff}
	for attempt := 0; attempt <= 70; attempt++ {
		ceiling := DefaultMaxBackoff
		if attempt < 10 && DefaultBaseBackoff<<attempt < ceiling {
			ceiling = DefaultBaseBackoff << attempt
		}
		var largest time.Duration
		for range 200 {
			d, err := j.BackoffDelay(attempt, nil)
			if err != nil || d < 0 || d > ceiling {
				t.Fatalf("BackoffDelay(%d) = %v, %v; want 0 to %v", attempt, d, err, ceiling)
			}
			largest = max(largest, d)
		}
		if largest < ceiling/4 {
			t.Errorf("BackoffDelay(%d): largest of 200 draws %v; want draws spread up to %v", attempt, largest, ceiling)
		}
	}
}
