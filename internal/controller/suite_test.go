//go:build !unit

package controller_test

import (
	"testing"

	"github.com/actionledger/actionledger/test/envtestutil"
)

// The tests of this package that need the control plane sit in files tagged "!unit", with this TestMain;
// 'make test-unit' builds the package with -tags unit and runs only the others (fake clients, pure functions),
// which need no TestMain. A new test file that uses env carries the tag too.

// env is the real control plane (kube-apiserver + etcd) shared by this package's tests.
var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }
