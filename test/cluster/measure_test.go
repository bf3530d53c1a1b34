package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/scheme"
	"github.com/actionledger/actionledger/test/destination"
)

func jsonBody(s string) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(s)} }

// containerCgroup returns the directory of a container's cgroup in the cgroup v1 hierarchy named (memory,
// cpu ...), under the cluster's cgroup root: <root>/kubepods[/<qos>]/pod<uid>/<container id>.
func (p *product) containerCgroup(hierarchy string, pod *corev1.Pod, cs *corev1.ContainerStatus) (string, error) {
	_, id, ok := strings.Cut(cs.ContainerID, "://")
	if !ok {
		return "", fmt.Errorf("container %s of %s has no id yet", cs.Name, pod.Name)
	}
	base := filepath.Join("/sys/fs/cgroup", hierarchy, p.c.Env["CGROUP_ROOT"], "kubepods")
	for _, qos := range []string{"", "burstable", "besteffort"} {
		dir := filepath.Join(base, qos, "pod"+string(pod.UID), id)
		if _, err := os.Stat(dir); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no %s cgroup for container %s of pod %s under %s", hierarchy, cs.Name, pod.Name, base)
}

// rootMountOptions returns the mount options of / as the container's first process sees it.
func (p *product) rootMountOptions(pod corev1.Pod, cs corev1.ContainerStatus) (string, error) {
	dir, err := p.containerCgroup("memory", &pod, &cs)
	if err != nil {
		return "", err
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")) //nolint:gosec // the cluster's cgroup
	if err != nil {
		return "", fmt.Errorf("reading the container's processes: %w", err)
	}
	pid, _, _ := strings.Cut(strings.TrimSpace(string(procs)), "\n")
	f, err := os.Open(filepath.Join("/proc", pid, "mountinfo")) //nolint:gosec // a pid of the cluster's cgroup
	if err != nil {
		return "", fmt.Errorf("reading the mounts of pid %s: %w", pid, err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo: id parent major:minor root mountpoint options ...
		fields := strings.Fields(sc.Text())
		if len(fields) > 5 && fields[4] == "/" {
			return fields[5], nil
		}
	}
	return "", errors.New("no mount on / in the container's mountinfo")
}

// memoryWatch samples the manager containers' memory cgroups every second for the whole run.
type memoryWatch struct {
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	peakRSS  map[string]int64 // pod -> the largest total_rss sampled
	maxUsage map[string]int64 // pod -> memory.max_usage_in_bytes (rss and page cache) last read
	limit    int64
	oomKills []string
	errs     []string
}

func (p *product) watchMemory(t *testing.T) *memoryWatch {
	t.Helper()
	m := &memoryWatch{stop: make(chan struct{}), done: make(chan struct{}), peakRSS: map[string]int64{}, maxUsage: map[string]int64{}}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			m.sample(p)
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(m.halt)
	return m
}

func (m *memoryWatch) halt() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

func (m *memoryWatch) sample(p *product) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := p.c.Clientset.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: managerSelector})
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range list.Items {
		pod := &list.Items[i]
		for j := range pod.Status.ContainerStatuses {
			cs := &pod.Status.ContainerStatuses[j]
			if cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.Reason == "OOMKilled" &&
				!slices.Contains(m.oomKills, pod.Name) {
				m.oomKills = append(m.oomKills, pod.Name)
			}
			if cs.Name != "manager" || cs.State.Running == nil {
				continue
			}
			dir, err := p.containerCgroup("memory", pod, cs)
			if err != nil {
				continue
			}
			rss, err1 := memoryStat(filepath.Join(dir, "memory.stat"), "total_rss")
			usage, err2 := readInt(filepath.Join(dir, "memory.max_usage_in_bytes"))
			limit, err3 := readInt(filepath.Join(dir, "memory.limit_in_bytes"))
			if err := errors.Join(err1, err2, err3); err != nil {
				m.errs = append(m.errs, err.Error())
				continue
			}
			m.peakRSS[pod.Name] = max(m.peakRSS[pod.Name], rss)
			m.maxUsage[pod.Name] = max(m.maxUsage[pod.Name], usage)
			m.limit = limit
		}
	}
}

// report stops the sampling, logs the peaks and checks them against the container's limit.
func (m *memoryWatch) report(t *testing.T) {
	t.Helper()
	m.halt()
	m.mu.Lock()
	defer m.mu.Unlock()
	var peakRSS, peakUsage int64
	pods := make([]string, 0, len(m.peakRSS))
	for pod, rss := range m.peakRSS {
		peakRSS, peakUsage = max(peakRSS, rss), max(peakUsage, m.maxUsage[pod])
		pods = append(pods, fmt.Sprintf("%s=%.1fMiB", pod, mib(rss)))
	}
	slices.Sort(pods)
	t.Logf("cluster: memory: manager container peak RSS %.1f MiB, peak usage with page cache %.1f MiB (memory.max_usage_in_bytes), limit %.0f MiB; per pod %v; OOM kills %d",
		mib(peakRSS), mib(peakUsage), mib(m.limit), pods, len(m.oomKills))
	if len(m.peakRSS) == 0 {
		t.Errorf("no sample of the manager's memory cgroup (errors: %v)", m.errs)
	}
	if len(m.oomKills) != 0 || (m.limit > 0 && peakUsage >= m.limit) {
		t.Errorf("the manager's memory limit did not hold: OOM-killed pods %v, peak usage %d of %d bytes", m.oomKills, peakUsage, m.limit)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path) //nolint:gosec // a cgroup file
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

func memoryStat(path, key string) (int64, error) {
	data, err := os.ReadFile(path) //nolint:gosec // a cgroup file
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s", path, key)
}

// The flood of API Priority and Fairness: floodAccounts ServiceAccounts of one namespace, floodPerAccount
// clients each, create ConfigMaps as fast as the API server takes them.
const (
	floodAccounts   = 48
	floodPerAccount = 8
	apfActions      = 40
)

// testPriorityAndFairness measures create → Succeeded of apfActions actions (created 4 a second by the admin,
// whom APF exempts) idle, under the flood with the chart's FlowSchema and PriorityLevelConfiguration, and under
// the same flood with them removed (helm upgrade --set priorityAndFairness.enabled=false). It checks that the
// manager's requests went through the chart's FlowSchema while it was installed, and logs the p50 and p99 of each
// run; the chart's value is restored at the end.
func testPriorityAndFairness(t *testing.T, p *product) {
	ctx := context.Background()
	fsName, plName := releaseName+"-manager-flowschema", releaseName+"-manager"
	if _, err := p.c.Clientset.FlowcontrolV1().FlowSchemas().Get(ctx, fsName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's FlowSchema %s: %v", fsName, err)
	}
	if _, err := p.c.Clientset.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, plName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's PriorityLevelConfiguration %s: %v", plName, err)
	}
	_, url := startDestination(t, destination.Options{})
	ns := createNamespace(t, p.c, "apf")
	p.kubectlIn(t, fmt.Sprintf("apiVersion: actions.actionledger.dev/v1alpha1\nkind: Destination\nmetadata: {name: fast}\nspec: {url: %s, timeout: 10s}\n", url),
		"apply", "-n", ns, "-f", "-")
	p.waitDestinationReady(t, ns, "fast")
	tokens := p.floodAccounts(t)

	idle, _ := p.latencies(t, ns, "idle-", false)
	dispatchedBefore := p.flowSchemaDispatched(t, fsName)
	fl := p.startFlood(t, tokens)
	with, _ := p.latencies(t, ns, "with-", false)
	withFlood := fl.halt()
	dispatched := p.flowSchemaDispatched(t, fsName) - dispatchedBefore

	p.helm(t, "upgrade", releaseName, filepath.Join(p.bin, "..", "dist", "chart"), "--namespace", releaseNamespace,
		"--reuse-values", "--set", "priorityAndFairness.enabled=false", "--wait", "--timeout", "3m")
	if _, err := p.c.Clientset.FlowcontrolV1().FlowSchemas().Get(ctx, fsName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the FlowSchema is still there after helm upgrade --set priorityAndFairness.enabled=false: %v", err)
	}
	fl = p.startFlood(t, tokens)
	// Without the FlowSchema the manager's writes queue behind the flood: an attempt whose outcome could not be
	// written before its claim expired ends OutcomeUnknown (the destination does not deduplicate), which is what the
	// FlowSchema exists to prevent. It is reported, not a failure of this step.
	without, unsettled := p.latencies(t, ns, "without-", true)
	withoutFlood := fl.halt()
	p.helm(t, "upgrade", releaseName, filepath.Join(p.bin, "..", "dist", "chart"), "--namespace", releaseNamespace,
		"--reuse-values", "--set", "priorityAndFairness.enabled=true", "--wait", "--timeout", "3m")

	t.Logf("cluster: apf: create->Succeeded of %d actions: idle p50=%.2fs p99=%.2fs; flood with the chart's FlowSchema p50=%.2fs p99=%.2fs (%s); flood without it p50=%.2fs p99=%.2fs of %d Succeeded, other ends %v (%s); manager requests dispatched through the FlowSchema during the flood: %.0f",
		apfActions, quantile(idle, 0.5), quantile(idle, 0.99), quantile(with, 0.5), quantile(with, 0.99), withFlood,
		quantile(without, 0.5), quantile(without, 0.99), len(without), unsettled, withoutFlood, dispatched)
	if dispatched <= 0 {
		t.Errorf("no request of the manager went through the chart's FlowSchema %s during the flood", fsName)
	}
}

// floodAccounts creates the flood's namespace and ServiceAccounts, allowed to create ConfigMaps there, and returns
// a token for each (TokenRequest).
func (p *product) floodAccounts(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	ns := createNamespace(t, p.c, "flood")
	p.kubectl(t, "create", "role", "flood", "-n", ns, "--verb=create", "--resource=configmaps")
	p.kubectl(t, "create", "rolebinding", "flood", "-n", ns, "--role=flood", "--group=system:serviceaccounts:"+ns)
	tokens := make([]string, 0, floodAccounts)
	for i := range floodAccounts {
		name := fmt.Sprintf("pipeline-%02d", i)
		if _, err := p.c.Clientset.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}},
			metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ServiceAccount %s: %v", name, err)
		}
		tokens = append(tokens, p.serviceAccountToken(t, ns, name))
	}
	p.floodNS = ns
	return tokens
}

// flood is a running flood of ConfigMap creates.
// floodWarmCreates is how many creates the flood makes before the measured actions start.
const floodWarmCreates = 2000

type flood struct {
	stop            chan struct{}
	stopOnce        sync.Once
	wg              sync.WaitGroup
	began           time.Time
	created, failed atomic.Int64
}

func (p *product) startFlood(t *testing.T, tokens []string) *flood {
	t.Helper()
	f := &flood{stop: make(chan struct{}), began: time.Now()}
	for _, token := range tokens {
		cfg := rest.CopyConfig(p.c.Config)
		cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = nil, nil, "", ""
		cfg.BearerToken, cfg.QPS, cfg.Burst = token, 1e6, 1e6
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatalf("a flood client: %v", err)
		}
		for range floodPerAccount {
			f.wg.Go(func() {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "flood-"}, Data: map[string]string{"k": "v"}}
				for {
					select {
					case <-f.stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err := cs.CoreV1().ConfigMaps(p.floodNS).Create(ctx, cm, metav1.CreateOptions{})
					cancel()
					if err != nil {
						f.failed.Add(1)
						continue
					}
					f.created.Add(1)
				}
			})
		}
	}
	t.Cleanup(func() { f.halt() }) // a test that fails below leaves no flood running
	// Measure once the flood is in full swing: its clients have made floodWarmCreates creates (about 2 s of it on
	// this machine), so the API server's queues are full before the first measured create.
	poll(t, time.Minute, fmt.Sprintf("the flood's first %d creates", floodWarmCreates), func(context.Context) (bool, error) {
		return f.created.Load() >= floodWarmCreates, nil
	})
	return f
}

// halt stops the flood and describes it.
func (f *flood) halt() string {
	f.stopOnce.Do(func() { close(f.stop) })
	f.wg.Wait()
	secs := time.Since(f.began).Seconds()
	return fmt.Sprintf("%d clients of %d ServiceAccounts, %.0f creates/s, %d refused or timed out",
		floodAccounts*floodPerAccount, floodAccounts, float64(f.created.Load())/secs, f.failed.Load())
}

// latencies creates apfActions actions 4 a second (as the admin, exempt from APF) and returns, for each that
// Succeeded, the time from its create call to the watch event that shows it so. An action that ends otherwise
// fails the test, unless tolerate: then it is counted by phase in others.
func (p *product) latencies(t *testing.T, ns, prefix string, tolerate bool) (out []time.Duration, others map[string]int) {
	t.Helper()
	wc, err := client.NewWithWatch(p.c.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w, err := wc.Watch(ctx, &actionsv1alpha1.ExternalActionList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watching the actions: %v", err)
	}
	defer w.Stop()
	var mu sync.Mutex
	sent := map[string]time.Time{}
	go func() {
		for i := range apfActions {
			name := fmt.Sprintf("%s%03d", prefix, i)
			mu.Lock()
			sent[name] = time.Now()
			mu.Unlock()
			if err := p.cl.Create(ctx, newAction(ns, name, "fast", fmt.Sprintf(`{"n":%d}`, i))); err != nil {
				t.Errorf("creating %s: %v", name, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	done := map[string]time.Duration{}
	others = map[string]int{}
	ended := map[string]bool{}
	for len(ended) < apfActions {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d actions ended within 4 minutes (%d Succeeded)", prefix, len(ended), apfActions, len(done))
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of %s ended", ns)
			}
			xa, isXA := ev.Object.(*actionsv1alpha1.ExternalAction)
			if !isXA || ev.Type == watch.Deleted || !strings.HasPrefix(xa.Name, prefix) {
				continue
			}
			switch {
			case ended[xa.Name] || !finished(xa.Status.Phase):
			case xa.Status.Phase == actionsv1alpha1.PhaseSucceeded:
				mu.Lock()
				done[xa.Name] = time.Since(sent[xa.Name])
				mu.Unlock()
				ended[xa.Name] = true
			case tolerate:
				others[string(xa.Status.Phase)]++
				ended[xa.Name] = true
			default:
				t.Fatalf("%s/%s ended %s", ns, xa.Name, xa.Status.Phase)
			}
		}
	}
	out = make([]time.Duration, 0, len(done))
	for _, d := range done {
		out = append(out, d)
	}
	slices.Sort(out)
	return out, others
}

// quantile returns the q-quantile of sorted durations in seconds (nearest rank).
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)].Seconds()
}

// flowSchemaDispatched returns the API server's count of requests dispatched through the FlowSchema named.
func (p *product) flowSchemaDispatched(t *testing.T, flowSchema string) float64 {
	t.Helper()
	out := p.kubectl(t, "get", "--raw", "/metrics")
	var sum float64
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") &&
			strings.Contains(line, `flow_schema="`+flowSchema+`"`) {
			if v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}
