package gateway

import (
	"strconv"
	"strings"
	"time"
)

// WaitPreference returns how long the client asks the gateway to wait for a final answer, from the RFC 7240
// Prefer header values ("Prefer: wait=5"; section 4.3, delta-seconds): def when absent or unparsable,
// capped at limit. applied says the client stated a usable wait, so that the answer carries
// Preference-Applied (section 3). The first wait preference counts (section 2: a repeated preference is the
// first one's).
func WaitPreference(values []string, def, limit time.Duration) (wait time.Duration, applied bool) {
	for _, v := range values {
		for pref := range strings.SplitSeq(v, ",") {
			token, _, _ := strings.Cut(pref, ";")
			name, val, ok := strings.Cut(strings.TrimSpace(token), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			val = strings.Trim(strings.TrimSpace(val), `"`)
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return min(def, limit), false
			}
			d := time.Duration(n) * time.Second
			return min(d, limit), true
		}
	}
	return min(def, limit), false
}
