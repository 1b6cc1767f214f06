package pki

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ContextName is the name of the cluster, user context and context in every
// kubeconfig devcluster writes.
const ContextName = "sluice-devcluster"

// WriteKubeconfig writes a kubeconfig for user that reaches server, with
// the CA and the user's certificate and key embedded so that the file works
// on its own.
func WriteKubeconfig(path, server string, f Files, user string) error {
	ca, err := os.ReadFile(f.CACert())
	if err != nil {
		return fmt.Errorf("read CA for kubeconfig: %w", err)
	}
	cert, err := os.ReadFile(f.ClientCert(user))
	if err != nil {
		return fmt.Errorf("read client certificate of %s: %w", user, err)
	}
	key, err := os.ReadFile(f.ClientKey(user))
	if err != nil {
		return fmt.Errorf("read client key of %s: %w", user, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName}
	cfg.CurrentContext = ContextName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("restrict kubeconfig %s: %w", path, err)
	}
	return nil
}
