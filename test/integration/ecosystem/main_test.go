package ecosystem_test

import (
	"testing"

	"github.com/actionledger/actionledger/test/envtestutil"
)

var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }
