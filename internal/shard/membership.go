// Package shard divides a destination's limits among the managers (shards) that use it, so that the provider
// sees one rateLimit, one concurrency.maxInFlight and one retry budget whatever the number of managers
// (docs/sharding.md).
//
// # The scheme: one Lease per shard, listing the destinations it uses
//
// Every sharded manager (one started with --watch-label-selector) holds one coordination.k8s.io/v1 Lease in
// its own namespace, labeled LabelMember, named after its shard (MemberName), renewed every Interval. Its
// annotation AnnotationDestinations lists the destinations the shard has used recently, as short hashes
// (DestinationHash), or "*" for all of them when the list would be too long. Every Interval the manager also
// lists the member Leases; destination D's limits are divided by 1 + the number of other live members that
// list D (or "*"). A member is live while its Lease changes at least once per LeaseDuration, measured on this
// manager's clock from the moment it saw the change (as client-go's leader election does), so clocks need not
// agree. Unlike one Lease per destination, the API cost is one write and one list per shard per Interval,
// whatever the number of destinations.
//
// # What is guaranteed
//
// A shard is never counted as absent by another while it admits a request, so the shares of a destination
// never add up to more than its limits (rate and retry-budget floor exactly; burst and maxInFlight with a
// floor of 1 per shard, see docs/sharding.md for the bound). Three rules make that true:
//
//   - Freshness. Share answers "wait" unless this manager's own last renewal and its last list both started
//     within Freshness (at most Freshness < LeaseDuration old). A shard cut off from the API server stops
//     admitting before any other shard may count it as gone.
//   - Joining waits. A destination a shard starts to use (or uses again after it dropped it from its list) is
//     announced in a renewal first; only Freshness after that renewal succeeded does the shard admit on it.
//     By then every other live member has listed after the announcement, or is itself waiting (freshness).
//     The same holds for the whole shard after a start or after a gap in its renewals longer than Freshness.
//   - Leaving is slow. A destination leaves a shard's list only after UnannounceAfter without any use, far
//     longer than a send can be in flight, and a member leaves the count only after LeaseDuration without a
//     change; both only give others a larger share once the leaver has stopped.
//
// Without sharding nothing here runs and every share is the whole limit (Share answers 1).
package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/actionledger/actionledger/internal/metrics"
)

const (
	// LabelKey is the label the sample configuration and docs/sharding.md use to assign an ExternalAction to a
	// shard (as Flux uses sharding.fluxcd.io/key); any label a --watch-label-selector selects will do.
	LabelKey = "sharding.actionledger.dev/key"
	// LabelMember marks the member Leases of the shards (value "true").
	LabelMember = "actions.actionledger.dev/shard-member"
	// AnnotationDestinations is a member Lease's list of the destinations its shard uses: comma-separated
	// DestinationHash values, or "*" for every destination.
	AnnotationDestinations = "actions.actionledger.dev/destinations"
	// AllDestinations is the AnnotationDestinations value of a shard that counts for every destination.
	AllDestinations = "*"

	// DefaultInterval is how often a member renews its Lease and lists the others (2s).
	DefaultInterval = 2 * time.Second
	// DefaultLeaseDuration is how long a member Lease may stay unchanged before the member is counted as gone
	// (15s, as the leader election's default).
	DefaultLeaseDuration = 15 * time.Second
	// DefaultUnannounceAfter is how long a destination stays on a shard's list after its last use (10 min).
	DefaultUnannounceAfter = 10 * time.Minute
	// DefaultForgetAfter is how long another member's Lease must stay unchanged, as seen by this manager, before
	// this manager deletes it (1 h): the Lease of a shard that is gone for good (without leader election each
	// process is its own member, so every restart leaves one behind). A shard whose Lease was deleted only
	// creates it again at its next renewal and joins anew, waiting as after a start.
	DefaultForgetAfter = time.Hour
	// MaxAnnounced is the most destinations a Lease lists one by one; past it the shard announces "*"
	// (about 17 bytes each, so the annotation stays far below the API server's 256 KiB).
	MaxAnnounced = 2000
)

// DestinationHash returns the short, stable name of destination id ("Destination/<ns>/<name>" or
// "ClusterDestination/<name>") in a member Lease: the first 16 hex digits of its SHA-256.
func DestinationHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}

// MemberName returns the member Lease name of the shard identified by id (its leader-election ID, or the
// process's holder identity without leader election): "actionledger-shard-" + 16 hex digits.
func MemberName(id string) string {
	return "actionledger-shard-" + DestinationHash(id)
}

// Membership is one manager's member Lease and its view of the others. Start it as a manager Runnable (it
// needs leader election: only a shard's leader is a member); Share is safe for concurrent use. A nil
// *Membership shares nothing: every Share is (1, 0, true).
type Membership struct {
	// Client writes the member Lease; Reader reads and lists the member Leases (the API server, not a cache).
	Client client.Client
	Reader client.Reader
	// Namespace and Name locate the member Lease; Holder is written as its holderIdentity.
	Namespace, Name, Holder string
	// Interval, LeaseDuration, UnannounceAfter and ForgetAfter: see the Default constants (zero takes them).
	Interval, LeaseDuration, UnannounceAfter, ForgetAfter time.Duration
	// Clock reads the time (default the real clock); the loop's ticks are real time.
	Clock clock.PassiveClock

	mu sync.Mutex
	// renewedAt and listedAt are when the latest successful renewal and list started; joinedAt is when the
	// renewal that ended the latest gap (or the first one) succeeded. Zero: never.
	renewedAt, listedAt, joinedAt time.Time
	// used is the latest use of each destination (by hash); announced is when the renewal that first listed
	// it succeeded (absent: not on the Lease yet).
	used      map[string]time.Time
	announced map[string]time.Time
	// others are the other member Leases seen, by name.
	others map[string]*member
	wake   chan struct{}
}

// member is another shard's Lease as last seen.
type member struct {
	resourceVersion string
	changedAt       time.Time // when this manager saw resourceVersion change (its clock)
	all             bool
	dests           map[string]bool
}

func (m *Membership) clock() clock.PassiveClock {
	if m.Clock == nil {
		return clock.RealClock{}
	}
	return m.Clock
}

func (m *Membership) interval() time.Duration {
	if m.Interval <= 0 {
		return DefaultInterval
	}
	return m.Interval
}

// freshness is how old the own renewal and list may be while this shard admits: 3 intervals, and less than a
// lease duration by at least one interval.
func (m *Membership) freshness() time.Duration {
	return min(3*m.interval(), m.leaseDuration()-m.interval())
}

func (m *Membership) leaseDuration() time.Duration {
	if m.LeaseDuration <= 0 {
		return DefaultLeaseDuration
	}
	return max(m.LeaseDuration, 2*m.interval())
}

func (m *Membership) unannounceAfter() time.Duration {
	if m.UnannounceAfter <= 0 {
		return DefaultUnannounceAfter
	}
	return m.UnannounceAfter
}

func (m *Membership) forgetAfter() time.Duration {
	if m.ForgetAfter <= 0 {
		return DefaultForgetAfter
	}
	return max(m.ForgetAfter, 2*m.leaseDuration())
}

func (m *Membership) init() {
	if m.used == nil {
		m.used, m.announced, m.others = map[string]time.Time{}, map[string]time.Time{}, map[string]*member{}
		m.wake = make(chan struct{}, 1)
	}
}

// NeedLeaderElection makes the membership run only on the shard's leader (the only one that sends).
func (m *Membership) NeedLeaderElection() bool { return true }

// Share returns how many shares destination id's limits are divided into for this manager at now (itself
// included), or ok=false and how long to wait before asking again: while this manager's view is not fresh,
// or until the others have seen that this shard uses id. Each call counts as a use of id.
func (m *Membership) Share(id string, now time.Time) (shares int, wait time.Duration, ok bool) {
	if m == nil {
		return 1, 0, true
	}
	h := DestinationHash(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	m.used[h] = now
	fresh := m.freshness()
	if m.joinedAt.IsZero() || now.Sub(m.renewedAt) >= fresh || now.Sub(m.listedAt) >= fresh {
		return 0, m.interval(), false
	}
	at, listed := m.announced[h]
	if !listed {
		m.poke()
		return 0, fresh, false
	}
	if at.Before(m.joinedAt) {
		at = m.joinedAt
	}
	if ready := at.Add(fresh); now.Before(ready) {
		return 0, max(ready.Sub(now), time.Millisecond), false
	}
	shares = 1
	for _, o := range m.others {
		if now.Sub(o.changedAt) < m.leaseDuration() && (o.all || o.dests[h]) {
			shares++
		}
	}
	metrics.ShardShare.WithLabelValues(id).Set(1 / float64(shares))
	return shares, 0, true
}

// Recheck is how long an action waiting at a divided limit waits at most before it asks again, so that it
// takes a larger share soon after another shard left: one LeaseDuration.
func (m *Membership) Recheck() time.Duration {
	if m == nil {
		return time.Duration(1<<63 - 1)
	}
	return m.leaseDuration()
}

// poke asks the loop to renew now (m.mu held).
func (m *Membership) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Start renews the member Lease and lists the others every Interval until ctx ends. The Lease is left to
// expire: deleting it while sends of this shard may still be open would hand its share to the others early.
func (m *Membership) Start(ctx context.Context) error {
	m.mu.Lock()
	m.init()
	wake := m.wake
	m.mu.Unlock()
	logger := log.FromContext(ctx).WithName("shard-membership").WithValues("lease", m.Namespace+"/"+m.Name)
	ticker := time.NewTicker(m.interval())
	defer ticker.Stop()
	for {
		if err := m.renew(ctx); err != nil {
			logger.Error(err, "Renewing the shard member Lease failed; this shard waits once its view is stale")
		}
		if err := m.list(ctx); err != nil {
			logger.Error(err, "Listing the shard member Leases failed; this shard waits once its view is stale")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-wake:
		}
	}
}

// renew writes the member Lease with the destinations used within UnannounceAfter.
func (m *Membership) renew(ctx context.Context) error {
	start := m.clock().Now()
	m.mu.Lock()
	m.init()
	var hashes []string
	for h, at := range m.used {
		if start.Sub(at) >= m.unannounceAfter() {
			delete(m.used, h)
			delete(m.announced, h) // from now on a use waits for a new announcement
			continue
		}
		hashes = append(hashes, h)
	}
	m.mu.Unlock()
	slices.Sort(hashes)
	value := strings.Join(hashes, ",")
	if len(hashes) > MaxAnnounced {
		value = AllDestinations
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Name}
	lease := &coordinationv1.Lease{}
	err := m.Reader.Get(ctx, key, lease)
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}
		m.fill(lease, value, start)
		err = m.Client.Create(ctx, lease)
	case err == nil:
		m.fill(lease, value, start)
		err = m.Client.Update(ctx, lease)
	}
	if err != nil {
		return fmt.Errorf("writing shard member Lease %s: %w", key, err)
	}
	done := m.clock().Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.joinedAt.IsZero() || start.Sub(m.renewedAt) >= m.freshness() {
		m.joinedAt = done // others may have counted this shard as gone: join again
	}
	m.renewedAt = start
	for _, h := range hashes {
		if _, ok := m.announced[h]; !ok {
			m.announced[h] = done
		}
	}
	return nil
}

func (m *Membership) fill(lease *coordinationv1.Lease, value string, now time.Time) {
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[LabelMember] = "true"
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[AnnotationDestinations] = value
	lease.Spec.HolderIdentity = new(m.Holder)
	lease.Spec.LeaseDurationSeconds = new(int32(min(math.Ceil(m.leaseDuration().Seconds()), math.MaxInt32)))
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

// list reads the other member Leases and counts the live ones (gauge actionledger_shard_members).
func (m *Membership) list(ctx context.Context) error {
	start := m.clock().Now()
	var leases coordinationv1.LeaseList
	if err := m.Reader.List(ctx, &leases, client.InNamespace(m.Namespace), client.MatchingLabels{LabelMember: "true"}); err != nil {
		return fmt.Errorf("listing shard member Leases in %s: %w", m.Namespace, err)
	}
	now := m.clock().Now()
	stale := m.count(leases.Items, start, now)
	// Forget members gone for good: delete their Leases, each only if unchanged since it was last seen.
	for _, l := range stale {
		err := m.Client.Delete(ctx, l, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the stale shard member Lease %s/%s: %w", l.Namespace, l.Name, err)
		}
	}
	return nil
}

// count records the member Leases listed at start (read by now) and counts the live ones; it returns the
// Leases unchanged for ForgetAfter, which list deletes.
func (m *Membership) count(items []coordinationv1.Lease, start, now time.Time) []*coordinationv1.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	seen := map[string]bool{}
	var stale []*coordinationv1.Lease
	for i := range items {
		l := &items[i]
		if l.Name == m.Name {
			continue
		}
		seen[l.Name] = true
		o := m.others[l.Name]
		if o != nil && o.resourceVersion == l.ResourceVersion {
			if now.Sub(o.changedAt) >= m.forgetAfter() {
				stale = append(stale, l)
			}
			continue
		}
		o = &member{resourceVersion: l.ResourceVersion, changedAt: now, dests: map[string]bool{}}
		for h := range strings.SplitSeq(l.Annotations[AnnotationDestinations], ",") {
			if h == AllDestinations {
				o.all = true
			} else if h != "" {
				o.dests[h] = true
			}
		}
		m.others[l.Name] = o
	}
	// An expired Lease is remembered while it exists, so that it does not count as new at the next list; one
	// that disappeared counts until it would have expired: its shard may still be sending, and will create it
	// again at its next renewal.
	live := 1
	for name, o := range m.others {
		switch {
		case now.Sub(o.changedAt) < m.leaseDuration():
			live++
		case !seen[name]:
			delete(m.others, name)
		}
	}
	m.listedAt = start
	metrics.ShardMembers.Set(float64(live))
	return stale
}
