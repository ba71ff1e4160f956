package sdk_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/wfm-dev/wfm/sdk"
)

// Calls a server started with `make run` (http://localhost:8080) as its
// bootstrap admin, whose token `make run` writes to .data/admin-token: it
// upgrades a deployment and, when wfm refuses, says why. (Not run by
// `go test`: it needs that server.)
func Example() {
	ctx := context.Background()
	token, err := os.ReadFile(".data/admin-token")
	if err != nil {
		log.Fatal(err)
	}
	c, err := sdk.NewClientWithResponses("http://localhost:8080", sdk.WithBearerToken(string(token)))
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.UpgradeDeploymentWithResponse(ctx, "6affc112-5d1e-4e4b-9b53-5f0c6b1c2a10", nil,
		sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	if err != nil {
		log.Fatal(err) // the server could not be reached
	}
	if p := sdk.ProblemOf(res.HTTPResponse, res.Body); p != nil {
		switch p.Name() {
		case "upgrade-path-required": // docs/problems.md#upgrade-path-required
			fmt.Println("go through:", p.AdditionalProperties["path"], "(or send path: auto)")
		default:
			log.Fatal(p) // for example "404 not-found: No deployment … (request …)"
		}
		return
	}
	fmt.Println("operation", res.JSON202.Id, "is", res.JSON202.State)
}
