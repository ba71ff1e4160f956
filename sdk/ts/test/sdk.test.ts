// Drives a real wfm server through the SDK: publish versions, deploy, act as
// the device that installs it, upgrade, and read the problems the server
// answers.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  createWfmClient,
  problemName,
  ProblemError,
  publishVersion,
  readProblem,
  unwrap,
  type WfmClient,
} from "../src/index.js";
import { startServer, type Server } from "./server.js";

const app = "ts-sdk-counter";
const clientId = "ts-plant";
const deviceId = "edge-ts-1";
const consoleOrigin = "https://console.example.com";

/** An application description of version; 2.0.0 is reached only from 1.1.0 on. */
function description(version: string): string {
  const lifecycle = version === "2.0.0" ? `lifecycle:\n  upgrade:\n    minUpgradeFrom: "1.1.0"\n` : "";
  return `apiVersion: v1
id: ${app}
metadata:
  name: TS SDK counter
  version: "${version}"
deploymentProfiles:
  - type: compose
    id: ${app}-compose
    components:
      - name: counter
        properties:
          repository: oci://registry.example.com/acme/counter
          revision: "${version}"
${lifecycle}`;
}

let server: Server;
let wfm: WfmClient;

before(async () => {
  server = await startServer(["-cors-origins", consoleOrigin]);
  wfm = createWfmClient({ baseUrl: server.mgmt, token: server.token });
});

after(async () => {
  await server?.stop();
});

/** device calls the device API as the test's device agent. */
async function device(method: string, path: string, body?: unknown): Promise<Response> {
  const init: RequestInit = { method, headers: { "X-WFM-Client-ID": clientId, "Content-Type": "application/json" } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
  }
  return fetch(server.device + path, init);
}

test("publish, deploy, upgrade and read a problem", async () => {
  // Publish three versions (YAML bodies); the same content again changes nothing.
  for (const v of ["1.0.0", "1.1.0", "2.0.0"]) {
    const res = await publishVersion(wfm, description(v), { idempotencyKey: `publish-${v}` });
    assert.equal(res.response.status, 201, JSON.stringify(res.error));
    assert.equal(res.data?.version, v);
    assert.equal(res.data?.applicationId, app);
    assert.equal(res.response.headers.get("Location"), `/mgmt/v1/applications/${app}/versions/${v}`);
    assert.ok(res.response.headers.get("ETag"), "ETag");
  }
  const again = await publishVersion(wfm, description("1.0.0"));
  assert.equal(again.response.status, 200);
  const versions = unwrap(await wfm.GET("/mgmt/v1/applications/{applicationId}/versions", { params: { path: { applicationId: app } } }));
  assert.deepEqual(versions.items.map((v) => v.version).sort(), ["1.0.0", "1.1.0", "2.0.0"]);
  assert.equal(versions.items.find((v) => v.version === "2.0.0")?.lifecycle.minUpgradeFrom, "1.1.0");

  // The device registers (Margo capabilities), then 1.0.0 is deployed to it.
  const caps = await device("PUT", `/api/v1/capabilities/${deviceId}`, {
    properties: {
      id: deviceId, vendor: "Acme", modelNumber: "A1", serialNumber: "S-ts-1",
      cpus: [{ cores: 4, architecture: "amd64" }], memory: "8Gi", storage: "64Gi",
      supportedRuntimes: ["oci"], supportedDeploymentTypes: ["helm", "compose"],
    },
  });
  assert.ok(caps.status === 200 || caps.status === 201, `capabilities: ${caps.status} ${await caps.text()}`);
  const created = await wfm.POST("/mgmt/v1/deployments", {
    body: { applicationId: app, version: "1.0.0", clientId, deviceId },
    params: { header: { "Idempotency-Key": "deploy-ts-1" } },
  });
  assert.equal(created.response.status, 201, JSON.stringify(created.error));
  const dep = unwrap(created);
  assert.equal(dep.version, "1.0.0");
  assert.equal(dep.revision, 1);
  assert.equal(created.response.headers.get("Location"), `/mgmt/v1/deployments/${dep.id}`);

  // The device reads its state manifest and reports the deployment installed.
  const manifestRes = await device("GET", "/api/v1/deployments");
  assert.equal(manifestRes.status, 200);
  const manifest = (await manifestRes.json()) as { manifestVersion: number; deployments: { deploymentId: string }[] };
  assert.deepEqual(manifest.deployments.map((d) => d.deploymentId), [dep.id]);
  const report = await device("POST", `/api/v1/deployments/${dep.id}/status`, {
    deploymentId: dep.id, adoptedManifestVersion: manifest.manifestVersion,
    status: { state: "installed" }, components: [{ name: "counter", state: "installed" }],
  });
  assert.ok(report.status === 200 || report.status === 201, `status report: ${report.status} ${await report.text()}`);
  const installed = await wfm.GET("/mgmt/v1/deployments/{deploymentId}", { params: { path: { deploymentId: dep.id } } });
  assert.equal(unwrap(installed).state, "installed");
  const etag = installed.response.headers.get("ETag");
  assert.ok(etag, "ETag of the deployment");

  // 1.0.0 -> 2.0.0 directly is unsafe (2.0.0 needs 1.1.0 first): a typed problem.
  const direct = await wfm.POST("/mgmt/v1/deployments/{deploymentId}/upgrade", {
    params: { path: { deploymentId: dep.id } },
    body: { targetVersion: "2.0.0" },
  });
  assert.equal(direct.data, undefined);
  const problem = readProblem(direct);
  assert.ok(problem, "a problem");
  assert.equal(problem.status, 422);
  assert.equal(problem.type, "https://github.com/wfm-dev/wfm/blob/main/docs/problems.md#upgrade-path-required");
  assert.equal(problemName(problem), "upgrade-path-required");
  assert.deepEqual(problem["path"], ["1.0.0", "1.1.0", "2.0.0"]);
  assert.equal(problem.requestId, direct.response.headers.get("X-Request-Id"));
  assert.throws(() => unwrap(direct), (err: unknown) => err instanceof ProblemError && err.problem?.status === 422);

  // Its plan with path: auto: one success shape (a Plan, no union with the operation), and nothing changes
  // (the ETag read before still matches below).
  const plan = unwrap(await wfm.POST("/mgmt/v1/deployments/{deploymentId}/upgrade/plan", {
    params: { path: { deploymentId: dep.id } },
    body: { targetVersion: "2.0.0", path: "auto" },
  }));
  assert.equal(plan.allowed, true, JSON.stringify(plan.problem));
  assert.equal(plan.type, "upgrade");
  assert.deepEqual(plan.hops, ["1.1.0", "2.0.0"]);

  // With path: auto the server plans both hops and runs them as one operation.
  const upgrade = await wfm.POST("/mgmt/v1/deployments/{deploymentId}/upgrade", {
    params: { path: { deploymentId: dep.id }, header: { "If-Match": etag, "Idempotency-Key": "upgrade-ts-1" } },
    body: { targetVersion: "2.0.0", path: "auto" },
  });
  assert.equal(upgrade.response.status, 202, JSON.stringify(upgrade.error));
  const op = unwrap(upgrade);
  if (!("steps" in op)) {
    assert.fail(`202 without an operation: ${JSON.stringify(op)}`);
  }
  assert.equal(op.type, "upgrade");
  assert.deepEqual(op.steps.map((s) => s.version), ["1.1.0", "2.0.0"]);
  assert.equal(upgrade.response.headers.get("Location"), `/mgmt/v1/operations/${op.id}`);
  const again2 = await wfm.GET("/mgmt/v1/operations/{operationId}", { params: { path: { operationId: op.id } } });
  assert.equal(unwrap(again2).deploymentId, dep.id);
});

test("a bad token is a problem", async () => {
  const stranger = createWfmClient({ baseUrl: server.mgmt, token: () => "wfm_not-a-token-000000000000" });
  const res = await stranger.GET("/mgmt/v1/deployments");
  const problem = readProblem(res);
  assert.ok(problem);
  assert.equal(problem.status, 401);
  assert.equal(res.response.status, 401);
  assert.match(problem.type, /docs\/problems\.md#/);
});

test("the package version is the contract's info.version", async () => {
  const { readFile } = await import("node:fs/promises");
  const pkg = JSON.parse(await readFile("package.json", "utf8")) as { version: string };
  const contract = await readFile("../../openapi.yaml", "utf8");
  const m = /^info:\n(?:  .*\n)*?  version: (\S+)$/m.exec(contract);
  assert.ok(m?.[1], "info.version in openapi.yaml");
  assert.equal(pkg.version, m[1]);
});

test("a web console on an allowed origin may call the management API", async () => {
  // The preflight a browser sends before the SDK's first call, and the call itself.
  const pre = await fetch(`${server.mgmt}/mgmt/v1/deployments`, {
    method: "OPTIONS",
    headers: { Origin: consoleOrigin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type" },
  });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get("Access-Control-Allow-Origin"), consoleOrigin);
  assert.equal(pre.headers.get("Access-Control-Allow-Headers"), "authorization,content-type");
  const wfmInBrowser = createWfmClient({ baseUrl: server.mgmt, token: server.token, headers: { Origin: consoleOrigin } });
  const res = await wfmInBrowser.GET("/mgmt/v1/deployments");
  assert.equal(res.response.status, 200);
  assert.equal(res.response.headers.get("Access-Control-Allow-Origin"), consoleOrigin);
  assert.match(res.response.headers.get("Access-Control-Expose-Headers") ?? "", /Location/);

  const other = await fetch(`${server.mgmt}/mgmt/v1/deployments`, {
    method: "OPTIONS",
    headers: { Origin: "https://elsewhere.example.com", "Access-Control-Request-Method": "POST" },
  });
  assert.equal(other.headers.get("Access-Control-Allow-Origin"), null);
});
