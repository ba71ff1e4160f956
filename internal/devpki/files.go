package devpki

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// File modes: certificates are public, keys readable by their owner only.
const (
	CertFileMode fs.FileMode = 0o644
	KeyFileMode  fs.FileMode = 0o600
)

// EncodePEM returns cert's chain as PEM CERTIFICATE blocks (leaf first) and
// its private key as a PEM PKCS #8 PRIVATE KEY block.
//
// Returns EINVALID if cert has no certificate or no private key, or a key
// type PKCS #8 cannot encode.
func EncodePEM(cert tls.Certificate) (certPEM, keyPEM []byte, err error) {
	if len(cert.Certificate) == 0 || cert.PrivateKey == nil {
		return nil, nil, lifecycle.Errorf(lifecycle.EINVALID, "the certificate or its private key is missing")
	}
	for _, der := range cert.Certificate {
		certPEM = append(certPEM, encodeCert(der)...)
	}
	keyPEM, err = encodeKey(cert.PrivateKey)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// WriteFiles saves the CA certificate to certFile (mode 0644) and its key to
// keyFile (mode 0600), replacing existing files atomically. LoadCAFiles reads
// them back.
//
// Returns the file system's error (wrapped) if a file cannot be written.
func (ca *CA) WriteFiles(certFile, keyFile string) error {
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	return WriteKeyPairFiles(certFile, keyFile, ca.certPEM, keyPEM)
}

// WriteKeyPairFiles saves certPEM to certFile (mode 0644) and keyPEM to
// keyFile (mode 0600). Each file is written to a temporary file in the same
// directory and renamed into place, so a reader never sees half a key and an
// existing key file never keeps wider permissions. The directories must
// exist.
//
// Returns the file system's error (wrapped) if a file cannot be written.
func WriteKeyPairFiles(certFile, keyFile string, certPEM, keyPEM []byte) error {
	if err := writeFileAtomic(keyFile, keyPEM, KeyFileMode); err != nil {
		return err
	}
	return writeFileAtomic(certFile, certPEM, CertFileMode)
}

// LoadCAFiles reads a CA saved by WriteFiles.
//
// Returns the file system's error (wrapped; errors.Is(err, fs.ErrNotExist)
// for a missing file) and the errors of LoadCA.
func LoadCAFiles(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("devpki: read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("devpki: read CA key: %w", err)
	}
	return LoadCA(certPEM, keyPEM)
}

// LoadOrCreateCA loads the CA saved in certFile and keyFile or, if neither
// exists, creates one named name, saves it there (creating missing
// directories with mode 0700) and reports created. It never overwrites a
// file: a development CA, once made, stays the trust anchor of every client
// certificate issued from it.
//
// Returns EINVALID if only one of the two files exists, and the errors of
// LoadCAFiles, NewCA and WriteFiles.
func LoadOrCreateCA(certFile, keyFile, name string) (ca *CA, created bool, err error) {
	certExists, err := exists(certFile)
	if err != nil {
		return nil, false, err
	}
	keyExists, err := exists(keyFile)
	if err != nil {
		return nil, false, err
	}
	switch {
	case certExists && keyExists:
		ca, err := LoadCAFiles(certFile, keyFile)
		return ca, false, err
	case certExists:
		return nil, false, lifecycle.Errorf(lifecycle.EINVALID, "CA certificate %s exists but its key %s does not; restore the key or remove both to create a new CA", certFile, keyFile)
	case keyExists:
		return nil, false, lifecycle.Errorf(lifecycle.EINVALID, "CA key %s exists but its certificate %s does not; restore the certificate or remove both to create a new CA", keyFile, certFile)
	}
	if ca, err = NewCA(name); err != nil {
		return nil, false, err
	}
	for _, dir := range []string{filepath.Dir(certFile), filepath.Dir(keyFile)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, false, fmt.Errorf("devpki: create directory: %w", err)
		}
	}
	if err := ca.WriteFiles(certFile, keyFile); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

func exists(name string) (bool, error) {
	_, err := os.Stat(name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("devpki: %w", err)
	}
}

// writeFileAtomic writes data to name with mode perm through a temporary
// file (created 0600) that is synced and renamed into place.
func writeFileAtomic(name string, data []byte, perm fs.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return fmt.Errorf("devpki: write %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("devpki: write %s: %w", name, err)
	}
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("devpki: write %s: %w", name, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("devpki: write %s: %w", name, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("devpki: write %s: %w", name, err)
	}
	if err = os.Rename(f.Name(), name); err != nil {
		return fmt.Errorf("devpki: write %s: %w", name, err)
	}
	return nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, lifecycle.Errorf(lifecycle.EINVALID, "the private key cannot be encoded: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseKey reads the first PEM private key block of keyPEM.
func parseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, lifecycle.Errorf(lifecycle.EMALFORMED, "the CA key file holds no PEM block")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, lifecycle.Errorf(lifecycle.EMALFORMED, "the CA key file holds a PEM %q block, not a private key", block.Type)
	}
	if err != nil {
		// The parse error describes the structure, never the key's bytes.
		return nil, lifecycle.Errorf(lifecycle.EMALFORMED, "the CA key cannot be parsed: %v", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, lifecycle.Errorf(lifecycle.EINVALID, "the CA key (%T) cannot sign", key)
	}
	return signer, nil
}
