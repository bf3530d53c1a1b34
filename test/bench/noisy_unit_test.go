package bench

import "testing"

// TestNoisyMediansAreTheRoundsMiddleRatios checks that the noisy part reports the median of each round's own
// ratio (beside over alone in the same round), not a ratio of pooled latencies, and that a slow round moves it
// by one place only.
func TestNoisyMediansAreTheRoundsMiddleRatios(t *testing.T) {
	rounds := []NoisyResult{
		{RatioP50: 1.2, RatioP99: 2.40},
		{RatioP50: 1.0, RatioP99: 1.11},
		{RatioP50: 1.1, RatioP99: 1.55},
	}
	p50, p99 := noisyMedians(rounds)
	if p50 != 1.1 || p99 != 1.55 {
		t.Errorf("medians of three rounds = %.2f, %.2f; want 1.10, 1.55", p50, p99)
	}
	rounds = append(rounds, NoisyResult{RatioP50: 9, RatioP99: 19.5})
	if _, p99 := noisyMedians(rounds); p99 != (1.55+2.40)/2 {
		t.Errorf("median of four rounds = %.3f; want the mean of the middle two, %.3f", p99, (1.55+2.40)/2)
	}
	if p50, p99 := noisyMedians(nil); p50 != 0 || p99 != 0 {
		t.Errorf("no rounds: %.2f, %.2f; want 0, 0", p50, p99)
	}
}
