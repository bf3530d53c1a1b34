//go:build !unit

package controller_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// The noisy neighbour, against a real API server and the real manager (issue 40, DESIGN rules 12 and 13):
// team-a runs, at once, the worst admitted predicate (its body's string split into characters five times over)
// on many actions, enough to keep every evaluation slot busy for many seconds, and its own Destination that
// answers 200, zstd, half of a frame declaring an 8 MiB window, then stalls. Meanwhile team-b's POST /charges
// are answered 201 with successWhen `response.statusCode == 201`. Every one of team-b's actions ends Succeeded
// after exactly one request: none is Failed for an answer its destination applied.
func TestNoisyNeighbourCannotFailAnotherTenant(t *testing.T) {
	const noisy, victims = 40, 20
	teamA, teamB := env.Namespace(t), env.Namespace(t)

	body := []byte(`{"s":"` + strings.Repeat("a", 4088) + `"}`)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}))
	defer slow.Close()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, 256<<10)
	_, _ = rand.Read(noise)
	_, _ = zw.Write(noise)
	_ = zw.Close()
	half := buf.Bytes()[:buf.Len()/2]
	stop := make(chan struct{})
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "zstd")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(half)
		w.(http.Flusher).Flush()
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer stall.Close()
	defer close(stop)
	env.CreateDestination(t, teamA, "slow", slow.URL, nil)
	env.CreateDestination(t, teamA, "stall", stall.URL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Timeout = &metav1.Duration{Duration: 3 * time.Second}
	})
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, teamB, "payments", url, nil)
	env.StartManager(t, app.Options{})

	worst := strings.TrimSuffix(strings.Repeat(`response.body.s.split('').all(c, true) && `, 5), " && ")
	for i := range noisy {
		xa := envtestutil.Action(teamA, fmt.Sprintf("slow-%d", i), "slow", "/x", `{}`)
		xa.Spec.SuccessWhen = worst
		env.Create(t, xa)
		if i%4 == 0 {
			env.Create(t, envtestutil.Action(teamA, fmt.Sprintf("stall-%d", i), "stall", "/x", `{}`))
		}
	}
	for i := range victims {
		xa := envtestutil.Action(teamB, fmt.Sprintf("charge-%d", i), "payments", "/charges", fmt.Sprintf(`{"n":%d}`, i))
		xa.Spec.SuccessWhen = "response.statusCode == 201"
		env.Create(t, xa)
	}
	for i := range victims {
		name := fmt.Sprintf("charge-%d", i)
		xa := env.WaitFor(t, teamB, name, 120*time.Second, "a finished phase", func(x *actionsv1alpha1.ExternalAction) bool {
			return x.Status.Phase.Terminal()
		})
		if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded {
			t.Errorf("%s/%s ended %s (%s); want Succeeded", teamB, name, xa.Status.Phase, xa.Status.LastError)
		}
		if got := srv.Requests(teamB + "/" + name); got != 1 {
			t.Errorf("%s/%s: the destination received %d requests, want 1", teamB, name, got)
		}
	}
}
