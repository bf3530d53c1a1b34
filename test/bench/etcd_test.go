package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// etcdClient talks to envtest's etcd through its JSON gateway (the gRPC API as JSON over HTTP on the client
// URL, https://etcd.io/docs/v3.5/dev-guide/api_grpc_gateway/), and reads its Prometheus /metrics on the same
// URL. int64 fields come as JSON strings (the protobuf JSON mapping), keys and values as base64.
type etcdClient struct {
	base string // http://127.0.0.1:<port>, no trailing slash
	hc   *http.Client
}

func newEtcdClient(base string) *etcdClient {
	return &etcdClient{base: strings.TrimRight(base, "/"), hc: &http.Client{Timeout: 2 * time.Minute}}
}

// int64s decodes an int64 that the gateway sends as a string (or, defensively, as a number); absent is 0.
type int64s int64

func (n *int64s) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("int64 %q: %w", s, err)
	}
	*n = int64s(v)
	return nil
}

func (c *etcdClient) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding %s request: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("etcd %s: reading the answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("etcd %s: decoding the answer: %w", path, err)
	}
	return nil
}

// prefixEnd is the range_end that selects every key starting with prefix (etcd's clientv3.GetPrefixRangeEnd).
func prefixEnd(prefix string) string {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return string(end[:i+1])
		}
	}
	return "\x00" // every key
}

// Stored is what etcd holds under one key prefix at the current revision: the number of keys and the sum of
// their key and value lengths in bytes (the API server's JSON of each custom resource, managedFields included).
type Stored struct {
	Keys       int64 `json:"keys"`
	KeyBytes   int64 `json:"keyBytes"`
	ValueBytes int64 `json:"valueBytes"`
}

// Bytes is key + value bytes.
func (s Stored) Bytes() int64 { return s.KeyBytes + s.ValueBytes }

// PerKey is Bytes / Keys (0 for no keys).
func (s Stored) PerKey() float64 {
	if s.Keys == 0 {
		return 0
	}
	return float64(s.Bytes()) / float64(s.Keys)
}

// count returns the number of keys under prefix (count_only: etcd sends no values).
func (c *etcdClient) count(ctx context.Context, prefix string) (int64, error) {
	var out struct {
		Count int64s `json:"count"`
	}
	in := map[string]any{"key": b64(prefix), "range_end": b64(prefixEnd(prefix)), "count_only": true}
	if err := c.post(ctx, "/v3/kv/range", in, &out); err != nil {
		return 0, err
	}
	return int64(out.Count), nil
}

// stored sums the keys and values under prefix, reading them in pages of 500.
func (c *etcdClient) stored(ctx context.Context, prefix string) (Stored, error) {
	var s Stored
	from, end := prefix, prefixEnd(prefix)
	for {
		var out struct {
			KVs []struct {
				Key   string `json:"key"`
				Value string `json:"value"`
			} `json:"kvs"`
			More bool `json:"more"`
		}
		in := map[string]any{"key": b64(from), "range_end": b64(end), "limit": 500}
		if err := c.post(ctx, "/v3/kv/range", in, &out); err != nil {
			return Stored{}, err
		}
		last := ""
		for _, kv := range out.KVs {
			k, err := base64.StdEncoding.DecodeString(kv.Key)
			if err != nil {
				return Stored{}, fmt.Errorf("etcd key: %w", err)
			}
			s.Keys++
			s.KeyBytes += int64(len(k))
			v, err := base64.StdEncoding.DecodeString(kv.Value)
			if err != nil {
				return Stored{}, fmt.Errorf("etcd value of %s: %w", k, err)
			}
			s.ValueBytes += int64(len(v))
			last = string(k)
		}
		if !out.More || last == "" {
			return s, nil
		}
		from = last + "\x00"
	}
}

// EtcdStatus is etcd's maintenance status: the backend (bbolt) file size, the part of it in use, and the
// current revision.
type EtcdStatus struct {
	DBSize      int64 `json:"dbSizeBytes"`
	DBSizeInUse int64 `json:"dbSizeInUseBytes"`
	Revision    int64 `json:"revision"`
}

func (c *etcdClient) status(ctx context.Context) (EtcdStatus, error) {
	var out struct {
		Header struct {
			Revision int64s `json:"revision"`
		} `json:"header"`
		DBSize      int64s `json:"dbSize"`
		DBSizeInUse int64s `json:"dbSizeInUse"`
	}
	if err := c.post(ctx, "/v3/maintenance/status", map[string]any{}, &out); err != nil {
		return EtcdStatus{}, err
	}
	return EtcdStatus{DBSize: int64(out.DBSize), DBSizeInUse: int64(out.DBSizeInUse), Revision: int64(out.Header.Revision)}, nil
}

// compactDefrag compacts the key history up to the current revision (what the API server does every
// --etcd-compaction-interval, 5m by default) and then defragments the backend (which nothing in Kubernetes
// does by itself: without it the file keeps its high-water size, and the quota counts the file), and returns
// the status after both.
func (c *etcdClient) compactDefrag(ctx context.Context) (EtcdStatus, error) {
	st, err := c.status(ctx)
	if err != nil {
		return EtcdStatus{}, err
	}
	if err := c.post(ctx, "/v3/kv/compaction", map[string]any{"revision": st.Revision, "physical": true}, nil); err != nil &&
		!strings.Contains(err.Error(), "compacted") {
		return EtcdStatus{}, err
	}
	if err := c.post(ctx, "/v3/maintenance/defragment", map[string]any{}, nil); err != nil {
		return EtcdStatus{}, err
	}
	return c.status(ctx)
}

// EtcdMetrics are etcd's own backend gauges from its /metrics.
type EtcdMetrics struct {
	// DBTotal is etcd_mvcc_db_total_size_in_bytes: the bbolt file, what --quota-backend-bytes (2 GiB by
	// default) is checked against.
	DBTotal float64 `json:"dbTotalSizeBytes"`
	// DBInUse is etcd_mvcc_db_total_size_in_use_in_bytes: the pages holding data (live keys and the history
	// not yet compacted); the rest is free pages that only a defragmentation returns.
	DBInUse float64 `json:"dbInUseBytes"`
}

func (c *etcdClient) metrics(ctx context.Context) (EtcdMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return EtcdMetrics{}, fmt.Errorf("etcd metrics: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return EtcdMetrics{}, fmt.Errorf("etcd metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	return parseEtcdMetrics(resp.Body)
}

// parseEtcdMetrics reads the two backend gauges from a Prometheus text exposition; a missing gauge is an error.
func parseEtcdMetrics(r io.Reader) (EtcdMetrics, error) {
	var m EtcdMetrics
	var total, inUse bool
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "etcd_mvcc_db_total_size_in_bytes":
			m.DBTotal, total = v, true
		case "etcd_mvcc_db_total_size_in_use_in_bytes":
			m.DBInUse, inUse = v, true
		}
	}
	if err := sc.Err(); err != nil {
		return EtcdMetrics{}, fmt.Errorf("etcd metrics: %w", err)
	}
	if !total || !inUse {
		return EtcdMetrics{}, fmt.Errorf("etcd metrics: etcd_mvcc_db_total_size_in_bytes or etcd_mvcc_db_total_size_in_use_in_bytes missing")
	}
	return m, nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
