package ecosystem_test

import (
	"slices"
	"strings"
	"testing"
)

// The shipped install is safe for many tenants by default (the tenancy issue's row 8): config/default and the
// chart run the manager with --require-service-account, and a single-team install turns it off with the one
// value tenancy.requireServiceAccount=false.
func TestShippedInstallRequiresServiceAccount(t *testing.T) {
	kmgr, _ := deployments(t, render(t, "config/default"))
	if args := kmgr.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--require-service-account") {
		t.Errorf("config/default runs the manager with %v, want --require-service-account", args)
	}
	for _, c := range []struct {
		set  []string
		want string
	}{
		{nil, "--require-service-account=true"},
		{[]string{"--set", "tenancy.requireServiceAccount=false"}, "--require-service-account=false"},
	} {
		mgr, _ := deployments(t, helmTemplate(t, c.set...))
		args := mgr.Spec.Template.Spec.Containers[0].Args
		n := 0
		for _, a := range args {
			if strings.HasPrefix(a, "--require-service-account") {
				n++
			}
		}
		if !slices.Contains(args, c.want) || n != 1 {
			t.Errorf("helm template %v: manager args %v, want %s once", c.set, args, c.want)
		}
	}
}
