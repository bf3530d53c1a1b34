package admission

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/gateway"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// Row 10 of issue 23: with config/admission/requested_by_policy.yaml installed, the requested-by annotation of
// an ExternalAction is the user name of whoever created it (request.userInfo), whatever the create carried, and
// no update can change or remove it. Before, anyone who could create an action wrote any name there.
func TestRequestedByIsTheRequester(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	env.InstallAdmissionPolicy(t, envtestutil.RequestedByPolicyFile, ns, func(p *actionsv1alpha1.ExternalAction) bool {
		return p.Annotations[gateway.AnnotationRequestedBy] != ""
	})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	self, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin := self.Status.UserInfo.Username
	// jane acts through impersonation by the admin; system:masters gives her the right to create.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "jane@example.com", Groups: []string{"system:masters"}}
	jane, err := client.New(cfg, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		who    string
		client client.Client
		want   string
	}{{"admin", env.Client, admin}, {"jane", jane, "jane@example.com"}} {
		t.Run(c.who, func(t *testing.T) {
			xa := action(ns, nil)
			xa.Name = "by-" + c.who
			xa.Annotations = map[string]string{gateway.AnnotationRequestedBy: "mallory", "other": "kept"}
			if err := c.client.Create(ctx, xa); err != nil {
				t.Fatal(err)
			}
			if got := xa.Annotations[gateway.AnnotationRequestedBy]; got != c.want || xa.Annotations["other"] != "kept" {
				t.Fatalf("created with requested-by %q and other %q, want %q and the other annotation kept",
					got, xa.Annotations["other"], c.want)
			}
			xa.Annotations[gateway.AnnotationRequestedBy] = "mallory"
			if err := c.client.Update(ctx, xa); err != nil {
				t.Fatal(err)
			}
			if got := xa.Annotations[gateway.AnnotationRequestedBy]; got != c.want {
				t.Errorf("an update to mallory left requested-by %q, want %q", got, c.want)
			}
			delete(xa.Annotations, gateway.AnnotationRequestedBy)
			if err := c.client.Update(ctx, xa); err != nil {
				t.Fatal(err)
			}
			if got := xa.Annotations[gateway.AnnotationRequestedBy]; got != c.want {
				t.Errorf("an update without requested-by left %q, want %q", got, c.want)
			}
		})
	}
	// Without annotations at all, the create gets the map.
	xa := action(ns, nil)
	xa.Name = "bare"
	if err := jane.Create(ctx, xa); err != nil {
		t.Fatal(err)
	}
	if got := xa.Annotations[gateway.AnnotationRequestedBy]; got != "jane@example.com" {
		t.Errorf("created without annotations: requested-by %q, want jane@example.com", got)
	}
}
