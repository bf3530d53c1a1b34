// Package gateway tests "actionledger gateway" as real processes (two gateway replicas and the manager, built
// from ./cmd) against a real kube-apiserver and etcd, with callers authenticated by ServiceAccount tokens from
// the TokenRequest API and authorized by RBAC (envtest runs the API server with --authorization-mode=RBAC and
// service-account signing keys).
package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/actionledger/actionledger/test/envtestutil"
)

const gatewayNS = "actionledger-gw-test"

var (
	env      *envtestutil.Env
	cs       *kubernetes.Clientset
	binDir   string
	gateways []string // base URLs of the two gateway replicas
	metrics  []string // their metrics base URLs
)

type proc struct {
	name string
	cmd  *exec.Cmd
	out  *envtestutil.SyncBuffer
}

var procs []*proc

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) (code int) {
	e, err := envtestutil.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env = e
	defer func() {
		for _, p := range procs {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			_ = p.cmd.Wait()
			if code != 0 {
				fmt.Fprintf(os.Stderr, "--- %s log:\n%s\n", p.name, p.out)
			}
		}
		_ = env.Env.Stop()
	}()
	if cs, err = kubernetes.NewForConfig(env.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "actionledger-gateway-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binDir = dir
	if err := envtestutil.Build(context.Background(), dir, map[string]string{"actionledger": "./cmd"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := setup(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// setup starts the manager (admin credentials) and two gateway replicas that run as the ServiceAccount
// "gateway" bound to config/gateway/role.yaml, so that the manifest's RBAC is what the test exercises.
func setup(dir string) error {
	ctx := context.Background()
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(admin, env.Env.KubeConfig, 0o600); err != nil {
		return err
	}
	if err := start("manager", filepath.Join(binDir, "actionledger"), "--kubeconfig="+admin, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--controller-namespace=default",
		"--claim-margin=1s", "--destination-allow-cidrs=127.0.0.1/32"); err != nil {
		return err
	}

	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gatewayNS}},
		metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().ServiceAccounts(gatewayNS).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "gateway", "role.yaml"))
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(raw, role); err != nil {
		return fmt.Errorf("config/gateway/role.yaml: %w", err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "gateway", Namespace: gatewayNS}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	token, err := requestToken(ctx, gatewayNS, "gateway")
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["gateway"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["gateway"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "gateway"}
	kc.CurrentContext = "gateway"
	gwKubeconfig := filepath.Join(dir, "gateway.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, gwKubeconfig); err != nil {
		return err
	}
	for i := range 2 {
		api, met := freeAddr(), freeAddr()
		if err := start(fmt.Sprintf("gateway-%d", i), filepath.Join(binDir, "actionledger"), "gateway",
			"--kubeconfig="+gwKubeconfig, "--insecure-listen", "--bind-address="+api, "--metrics-bind-address="+met,
			"--health-probe-bind-address=0", "--auth-cache-ttl=1s", "--zap-log-level=debug"); err != nil {
			return err
		}
		gateways = append(gateways, "http://"+api)
		metrics = append(metrics, "http://"+met)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, g := range gateways {
		for {
			resp, err := http.Get(g + "/readyz") //nolint:noctx // a readiness probe in TestMain
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("gateway %s is not ready: %v", g, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func start(name, bin string, args ...string) error {
	cmd := exec.CommandContext(context.Background(), bin, args...) //nolint:gosec // the binary TestMain built
	out := &envtestutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	procs = append(procs, &proc{name: name, cmd: cmd, out: out})
	return nil
}

func freeAddr() string {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// requestToken returns a one-hour token of the ServiceAccount namespace/name from the TokenRequest API.
func requestToken(ctx context.Context, namespace, name string) (string, error) {
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}
