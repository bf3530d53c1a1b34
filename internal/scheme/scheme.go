// Package scheme holds the runtime.Scheme of the manager, the gateway and the tests: the Kubernetes core types
// (client-go's scheme) and actionledger's API (actions.actionledger.dev/v1alpha1).
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Scheme holds the Kubernetes core types and actionledger's API.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(actionsv1alpha1.AddToScheme(Scheme))
}
