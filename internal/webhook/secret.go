package webhook

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// secretPrefix starts every signing secret, as the Standard Webhooks
// specification suggests ("whsec_" + base64 of the key).
const secretPrefix = "whsec_"

// KeySize is the size of the key that encrypts stored secrets (AES-256).
const KeySize = 32

// newSecret returns a new signing secret: "whsec_" + base64 of 32 random
// bytes (the spec asks for 24 to 64).
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// secretKey returns the HMAC key of a secret (its base64 part decoded).
func secretKey(secret string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	return k, nil
}

// Keyring encrypts and decrypts stored signing secrets with AES-256-GCM.
// Each ciphertext is bound to its subscription's id (additional data), so
// a secret copied to another row does not decrypt.
type Keyring struct{ aead cipher.AEAD }

// NewKeyring returns a keyring on key (KeySize bytes). Returns an error for
// a key of another size.
func NewKeyring(key []byte) (*Keyring, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("webhook key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	return &Keyring{aead: aead}, nil
}

// seal encrypts secret for subscription id: nonce || ciphertext.
func (k *Keyring) seal(id, secret string) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(secret)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	return k.aead.Seal(nonce, nonce, []byte(secret), []byte(id)), nil
}

// open decrypts what seal returned for subscription id. Returns an error if
// it was sealed with another key or for another id, or was altered.
func (k *Keyring) open(id string, sealed []byte) (string, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("webhook secret: ciphertext too short")
	}
	b, err := k.aead.Open(nil, sealed[:n], sealed[n:], []byte(id))
	if err != nil {
		return "", fmt.Errorf("webhook secret: decrypt (another -webhook-key-file?): %w", err)
	}
	return string(b), nil
}

// LoadKey reads the key from path: KeySize bytes as base64 (standard
// encoding, surrounding white space ignored). Returns an error if the file
// cannot be read or holds no such key.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("webhook key %s: want %d bytes as base64 (openssl rand -base64 32)", path, KeySize)
	}
	return key, nil
}

// LoadOrCreateKey returns the key in path, creating it first (mode 0600,
// its folder 0700) with a random key if it does not exist: the development
// mode's key, kept in the data dir like the development CA. Returns an error
// if the file cannot be read or written or holds no key.
func LoadOrCreateKey(path string) ([]byte, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("webhook key: %w", err)
		}
		key := make([]byte, KeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("webhook key: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("webhook key: %w", err)
		}
		if err == nil { // another process may have won the race: read its key
			_, werr := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				return nil, fmt.Errorf("webhook key: %w", werr)
			}
		}
	}
	return LoadKey(path)
}
