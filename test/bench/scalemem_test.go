package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// TombstoneMemory is the manager's memory per cached ActionTombstone (objects store): the tombstone
// collector's informer and the tombstone index (objects.Index)'s snapshot of names hold every tombstone of the cluster.
type TombstoneMemory struct {
	Cached int    `json:"cachedTombstones"`
	Empty  Memory `json:"emptyManager"`
	With   Memory `json:"withTombstones"`
	// Per-tombstone growth over the empty manager, in bytes.
	LivePerTombstone  float64 `json:"gcLiveHeapBytesPerTombstone"`
	InusePerTombstone float64 `json:"heapInuseBytesPerTombstone"`
	RSSPerTombstone   float64 `json:"rssBytesPerTombstone"`
	// TemplateBytes is the stored tombstone every copy was made from, as etcd holds it (key + value).
	TemplateBytes int64   `json:"templateEtcdBytes"`
	StartSeconds  float64 `json:"secondsToSync"`
	Load          string  `json:"loadavg"`
}

// cachedTombstones is BENCH_SCALE_CACHED_TOMBSTONES: how many tombstones the memory measurement caches
// (default 20,000; 0 skips it).
func cachedTombstones(getenv func(string) string) (int, error) {
	v := strings.TrimSpace(getenv("BENCH_SCALE_CACHED_TOMBSTONES"))
	if v == "" {
		return 20000, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("BENCH_SCALE_CACHED_TOMBSTONES=%q: want a whole number >= 0", v)
	}
	return n, nil
}

// tombstoneMemory measures the manager empty (one collected action, whose tombstone is the template), then
// with n copies of that tombstone written before it starts, once it has reconciled all of them.
func tombstoneMemory(t *testing.T, bin, dir string, n int) TombstoneMemory {
	t.Helper()
	ctx := context.Background()
	e := newEnv(t)
	ns := e.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	e.CreateDestination(t, ns, "fast", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Retention = &actionsv1alpha1.Retention{TTLAfterFinished: &metav1.Duration{Duration: time.Second},
			TombstoneTTL: &metav1.Duration{Duration: 720 * time.Hour}}
	})
	window := 15 * time.Second
	p := startManager(t, e, bin, dir, 16)
	e.Create(t, envtestutil.Action(ns, "template", "fast", "/x", `{"i":1}`))
	tmpl := &actionsv1alpha1.ActionTombstone{}
	envtestutil.Eventually(t, 60*time.Second, envtestutil.Say("the template action to be collected into a tombstone"), func() bool {
		return e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "template"}, tmpl) == nil
	})
	base := p.memory(t, window, true)
	p.stop()
	etcd := newEtcdClient(e.Env.ControlPlane.Etcd.URL.String())
	st, err := etcd.stored(ctx, fmt.Sprintf("/registry/%s/actiontombstones/%s/template", actionsv1alpha1.GroupVersion.Group, ns))
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && !failed.Load(); i = int(next.Add(1)) - 1 {
				ts := &actionsv1alpha1.ActionTombstone{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("ts-%d", i),
					Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
				ts.Spec.Key = ns + "/" + ts.Name
				if err := e.Client.Create(ctx, ts); err != nil {
					failed.Store(true)
					t.Errorf("creating a tombstone: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		t.FailNow()
	}
	t.Logf("wrote %d tombstones in %s", n, time.Since(t0).Round(time.Second))
	load := loadavg()
	start := time.Now()
	p = startManager(t, e, bin, dir, 16)
	defer p.stop()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		m, err := p.scrape()
		if err == nil && sum(m, "controller_runtime_reconcile_total", `controller="actiontombstone"`) >= float64(n) &&
			sum(m, "workqueue_depth", `name="actiontombstone"`) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manager did not reconcile %d tombstones in 10m (last error %v)", n, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	synced := time.Since(start).Seconds()
	m := p.memory(t, window, true)
	r := TombstoneMemory{Cached: n, Empty: base, With: m, TemplateBytes: st.Bytes(), StartSeconds: synced, Load: load + " -> " + loadavg(),
		LivePerTombstone:  (m.LiveHeap - base.LiveHeap) / float64(n),
		InusePerTombstone: (m.HeapInuse - base.HeapInuse) / float64(n),
		RSSPerTombstone:   (m.RSS - base.RSS) / float64(n)}
	t.Logf("%d cached tombstones: %s (empty: %s); per tombstone: live %.0f B, in use %.0f B, RSS %.0f B (stored %d B); synced in %.1fs",
		n, fmtMem(m), fmtMem(base), r.LivePerTombstone, r.InusePerTombstone, r.RSSPerTombstone, r.TemplateBytes, synced)
	return r
}

// scaleOut is the JSON of the scale part.
type scaleOut struct {
	Stores           []ScaleResult    `json:"stores"`
	CachedTombstones *TombstoneMemory `json:"cachedTombstones,omitempty"`
}
