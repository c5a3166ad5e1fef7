package servers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// VersityVersion is the versitygw release the harness installs (go
// install through the module proxy; Makefile target deps-versitygw).
const VersityVersion = "v1.8.0"

// S3Server is a reachable S3-compatible server.
type S3Server struct {
	// Endpoint is the base URL (http://127.0.0.1:PORT), path-style.
	Endpoint string
	// AccessKey and SecretKey are the root credentials. SecretKey is
	// never printed (String leaves it out).
	AccessKey, SecretKey string
	Region               string
}

// String names the server without its secret key.
func (s *S3Server) String() string { return s.Endpoint + " (access key " + s.AccessKey + ")" }

// Env is the AWS environment that points an SDK client at the server.
func (s *S3Server) Env() []string {
	return []string{"AWS_ENDPOINT_URL=" + s.Endpoint, "AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey, "AWS_REGION=" + s.Region,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
}

// findVersity finds the versitygw binary: $RTR_VERSITYGW, $GOBIN,
// $GOPATH/bin, PATH.
func findVersity() (string, error) {
	if p := os.Getenv("RTR_VERSITYGW"); p != "" {
		return p, nil
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, d := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	}
	p, err := findBinary("versitygw", "", dirs...)
	if err != nil {
		return "", fmt.Errorf("versitygw not found (looked in %s and PATH); install it with: go install github.com/versity/versitygw/cmd/versitygw@%s (make deps does)", strings.Join(dirs, ", "), VersityVersion)
	}
	return p, nil
}

// LaunchVersityGW starts versitygw (a real S3 gateway over a POSIX
// directory) on a free loopback port with its buckets under dir/root and
// its log in dir/versitygw.log, and creates the given buckets. stop ends
// it.
func LaunchVersityGW(ctx context.Context, dir string, buckets ...string) (s *S3Server, stop func() error, err error) {
	bin, err := findVersity()
	if err != nil {
		return nil, nil, err
	}
	root := filepath.Join(dir, "root")
	for _, b := range buckets {
		// A directory under the root is a bucket.
		if err := os.MkdirAll(filepath.Join(root, b), 0o755); err != nil {
			return nil, nil, fmt.Errorf("start versitygw: %w", err)
		}
	}
	ctx, cancel := withStartDeadline(ctx)
	defer cancel()
	po := procOptions{dir: dir, logPath: filepath.Join(dir, "versitygw.log")}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		s = &S3Server{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), AccessKey: "rtrtest", SecretKey: randomPassword(), Region: "us-east-1"}
		// The credentials go through the environment, never the
		// command line (ps shows that).
		po.env = []string{"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey}
		srv, err := startServer(po, bin, "--port", "127.0.0.1:"+strconv.Itoa(port), "--quiet", "posix", root)
		if err != nil {
			return nil, nil, err
		}
		err = pollUntil(ctx, srv, func(ctx context.Context) error {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				return err
			}
			c.Close()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		})
		if err == nil {
			return s, func() error { return srv.stop(context.Background(), syscall.SIGTERM) }, nil
		}
		srv.stop(context.Background(), syscall.SIGKILL)
		if attempt+1 >= bindAttempts {
			return nil, nil, fmt.Errorf("start versitygw: %w\n%s", err, readTail(po.logPath, 20))
		}
	}
}
