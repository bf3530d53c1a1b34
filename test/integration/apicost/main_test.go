// Package apicost tests the levers that take API calls off the happy path (issue #13) against a real
// kube-apiserver and etcd: the finalizer added at admission, tombstone lookups served from the cache, and the
// trimmed cache of finished actions.
package apicost

import (
	"testing"

	"github.com/actionledger/actionledger/test/envtestutil"
)

// env is the real control plane shared by this package's tests. They do not run in parallel: some count the
// API server's requests, and the admission policy applies to the whole cluster while it is installed.
var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }
