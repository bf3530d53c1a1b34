package noisy

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Writes tallies the watch events of one namespace's ExternalActions while it runs: by what each new copy says
// (event type, phase and the reason of its Reconciling condition) and by second. Team-a's tally over team-b's
// run says which of team-a's writes the API server served beside team-b's, and when.
type Writes struct {
	mu      sync.Mutex
	began   time.Time
	byState map[string]int
	perSec  map[int]int
	secs    map[int]map[string]int // per second, by state
	cancel  context.CancelFunc
	done    chan struct{}
}

// WatchWrites starts tallying ns's ExternalAction events; Stop ends it. The watch starts at the namespace's
// current resourceVersion (read with a list of one item), so it tallies only the writes made from now on and puts
// no initial list of every existing action on the API server (about 600 of team-a's, at the moment team-b's run
// begins: the trace must not be a burst of its own).
func WatchWrites(ctx context.Context, wc client.WithWatch, ns string) (*Writes, error) {
	var now actionsv1alpha1.ExternalActionList
	if err := wc.List(ctx, &now, client.InNamespace(ns), client.Limit(1)); err != nil {
		return nil, fmt.Errorf("listing %s: %w", ns, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := wc.Watch(ctx, &actionsv1alpha1.ExternalActionList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: now.ResourceVersion}})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching %s: %w", ns, err)
	}
	t := &Writes{began: time.Now(), byState: map[string]int{}, perSec: map[int]int{}, secs: map[int]map[string]int{},
		cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			xa, ok := ev.Object.(*actionsv1alpha1.ExternalAction)
			if !ok || ev.Type == watch.Bookmark {
				continue
			}
			reason := ""
			if c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling); c != nil &&
				c.Status == "True" {
				reason = c.Reason
			}
			t.mu.Lock()
			state, sec := fmt.Sprintf("%s %s/%s", ev.Type, xa.Status.Phase, reason), int(time.Since(t.began)/time.Second)
			t.byState[state]++
			t.perSec[sec]++
			if t.secs[sec] == nil {
				t.secs[sec] = map[string]int{}
			}
			t.secs[sec][state]++
			t.mu.Unlock()
		}
	}()
	return t, nil
}

// Stop ends the tally and returns it as lines to log: the events per second from the start (UTC), each state's
// count, most first, and the states of the busiest second.
func (t *Writes) Stop() []string {
	t.cancel()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	secs := slices.Sorted(maps.Keys(t.perSec))
	per := make([]string, 0, len(secs))
	total := 0
	for _, s := range secs {
		per = append(per, fmt.Sprintf("%d", t.perSec[s]))
		total += t.perSec[s]
	}
	lines := []string{fmt.Sprintf("%d events from %s, per second: %s", total, t.began.UTC().Format("15:04:05.000"),
		strings.Join(per, " "))}
	states := slices.SortedFunc(maps.Keys(t.byState), func(a, b string) int {
		return cmp.Compare(t.byState[b], t.byState[a])
	})
	for _, s := range states {
		lines = append(lines, fmt.Sprintf("%5d %s", t.byState[s], s))
	}
	busiest := -1
	for _, s := range secs {
		if busiest < 0 || t.perSec[s] > t.perSec[busiest] {
			busiest = s
		}
	}
	if busiest >= 0 {
		in := t.secs[busiest]
		parts := make([]string, 0, len(in))
		for _, s := range slices.SortedFunc(maps.Keys(in), func(a, b string) int { return cmp.Compare(in[b], in[a]) }) {
			parts = append(parts, fmt.Sprintf("%d %s", in[s], s))
		}
		lines = append(lines, fmt.Sprintf("busiest second (+%d s, %d events): %s", busiest, t.perSec[busiest],
			strings.Join(parts, ", ")))
	}
	return lines
}
