package admission

import (
	"testing"

	"github.com/actionledger/actionledger/test/envtestutil"
)

// env is the real control plane shared by this package's tests.
var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }
