package devicesim

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryAfterDateCountsFromTheDevicesClock: an HTTP-date Retry-After is
// counted from Config.Now, not from the machine's clock.
func TestRetryAfterDateCountsFromTheDevicesClock(t *testing.T) {
	now := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, tt := range []struct {
		after time.Duration
		want  time.Duration
	}{
		{30 * time.Second, 30 * time.Second},
		{0, 100 * time.Millisecond}, // at least Base/10
		{-time.Minute, 100 * time.Millisecond},
	} {
		res := &http.Response{Header: http.Header{"Retry-After": {now.Add(tt.after).Format(http.TimeFormat)}}}
		if got := (Retry{}).delay(res, nil, 0, now); got != tt.want {
			t.Errorf("delay(Retry-After: now%+v) = %s, want %s", tt.after, got, tt.want)
		}
	}
}
