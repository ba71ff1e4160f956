/**
 * The TypeScript client of the wfm management API.
 *
 * The types (`schema.gen.ts`) are generated from the repository's
 * `openapi.yaml` by openapi-typescript (`npm run generate`, or
 * `make generate-ts` at the repository root); the runtime is openapi-fetch,
 * a thin typed wrapper around `fetch` that works in browsers and in
 * Node.js 20+. What is written by hand here is only what every caller would
 * otherwise repeat: the bearer token, publishing a YAML application
 * description (openapi-fetch serializes bodies as JSON), and reading an
 * RFC 9457 problem out of an error answer as a typed value.
 *
 * @module
 */
import createClient, { type Client, type ClientOptions, type Middleware } from "openapi-fetch";

import type { components, paths } from "./schema.gen.js";

export type { components, operations, paths } from "./schema.gen.js";

/** WfmClient is a typed client of every operation of openapi.yaml. */
export type WfmClient = Client<paths>;

/**
 * Problem is an RFC 9457 problem as wfm sends it (`application/problem+json`):
 * `type`, `title` and `status` always, and for some types more members (the
 * computed `path` of `upgrade-path-required`, `errors` of a validation
 * failure, `retryAfterSeconds` of a 429 or 503, …). The types are listed in
 * docs/problems.md.
 */
export type Problem = components["schemas"]["Problem"];

/** A bearer token, or a function that returns the current one (for tokens that are renewed). */
export type TokenSource = string | (() => string | Promise<string>);

/** Options of createWfmClient: openapi-fetch's, plus the management API token. */
export interface WfmClientOptions extends ClientOptions {
  /** The server's address, such as `http://localhost:8080` (no trailing `/mgmt/v1`: paths carry it). */
  baseUrl: string;
  /** The management API token (`wfm_…`), sent as `Authorization: Bearer …` on every request. */
  token?: TokenSource;
}

/**
 * bearerAuth is an openapi-fetch middleware that sets
 * `Authorization: Bearer <token>` on every request; token may be a function,
 * asked before each request.
 */
export function bearerAuth(token: TokenSource): Middleware {
  return {
    async onRequest({ request }) {
      const value = typeof token === "function" ? await token() : token;
      request.headers.set("Authorization", `Bearer ${value}`);
      return request;
    },
  };
}

/**
 * createWfmClient returns a client of the server at options.baseUrl that
 * authenticates with options.token (when given).
 *
 * @example
 * const wfm = createWfmClient({ baseUrl: "http://localhost:8080", token: process.env.WFM_TOKEN });
 * const { data, error, response } = await wfm.GET("/mgmt/v1/deployments/{deploymentId}", {
 *   params: { path: { deploymentId: "dep_…" } },
 * });
 */
export function createWfmClient(options: WfmClientOptions): WfmClient {
  const { token, ...rest } = options;
  const client = createClient<paths>(rest);
  if (token !== undefined) {
    client.use(bearerAuth(token));
  }
  return client;
}

/** Options of publishVersion. */
export interface PublishOptions {
  /** Repeating the call with the same key and body answers the original response (kept 24 hours). */
  idempotencyKey?: string;
  /** Cancels the request. */
  signal?: AbortSignal;
}

/**
 * publishVersion adds an application version to the catalog from its
 * description (a Margo application description, YAML as written by the
 * supplier): `POST /mgmt/v1/applications` with `Content-Type:
 * application/yaml`. It answers as every openapi-fetch call does: `data`
 * (201 added, 200 the same content was already stored) or `error` (a
 * Problem: 422 `invalid-description` with every problem located, 409
 * `version-exists` for different content under an existing version, …).
 */
export function publishVersion(client: WfmClient, yaml: string, options: PublishOptions = {}) {
  return client.POST("/mgmt/v1/applications", {
    params: { header: options.idempotencyKey === undefined ? {} : { "Idempotency-Key": options.idempotencyKey } },
    body: yaml,
    bodySerializer: (body: unknown) => body as string,
    headers: { "Content-Type": "application/yaml" },
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  });
}

/**
 * isProblem reports whether value has the members every RFC 9457 problem of
 * wfm has: `type` and `title` (strings) and `status` (a number).
 */
export function isProblem(value: unknown): value is Problem {
  if (typeof value !== "object" || value === null) {
    return false;
  }
  const v = value as Record<string, unknown>;
  return typeof v["type"] === "string" && typeof v["title"] === "string" && typeof v["status"] === "number";
}

/**
 * readProblem returns the problem of an openapi-fetch result whose answer
 * was an error (`application/problem+json`), or undefined when the call
 * succeeded or the answer was not a problem (a proxy's HTML page, say).
 *
 * @example
 * const res = await wfm.POST("/mgmt/v1/deployments/{deploymentId}/upgrade", { params, body });
 * const problem = readProblem(res);
 * if (problem && problemName(problem) === "upgrade-path-required") { … problem["path"] … }
 */
export function readProblem(result: { error?: unknown; response: Response }): Problem | undefined {
  if (result.response.ok) {
    return undefined;
  }
  const type = result.response.headers.get("Content-Type") ?? "";
  if (!type.toLowerCase().startsWith("application/problem+json")) {
    return undefined;
  }
  return isProblem(result.error) ? result.error : undefined;
}

/**
 * problemName is the short name of a problem's type: the part after `#`
 * (`upgrade-path-required` for
 * `https://github.com/wfm-dev/wfm/blob/main/docs/problems.md#upgrade-path-required`;
 * Margo's types of the device API are named the same way), else the whole
 * type.
 */
export function problemName(problem: Problem): string {
  const i = problem.type.lastIndexOf("#");
  return i < 0 ? problem.type : problem.type.slice(i + 1);
}

/** ProblemError is thrown by unwrap for an error answer; problem is undefined when the answer was not a problem. */
export class ProblemError extends Error {
  /** The problem the server answered, when it answered one. */
  readonly problem: Problem | undefined;
  /** The answer. */
  readonly response: Response;

  constructor(response: Response, problem: Problem | undefined) {
    super(
      problem === undefined
        ? `${response.status} ${response.statusText}`
        : `${problem.status} ${problem.title}${problem.detail === undefined ? "" : `: ${problem.detail}`}`,
    );
    this.name = "ProblemError";
    this.problem = problem;
    this.response = response;
  }
}

/**
 * unwrap returns the data of a successful openapi-fetch result and throws a
 * ProblemError for an error answer, for callers that prefer exceptions.
 */
export function unwrap<R extends { data?: unknown; error?: unknown; response: Response }>(result: R): NonNullable<R["data"]> {
  if (!result.response.ok || result.error !== undefined) {
    throw new ProblemError(result.response, readProblem(result));
  }
  return result.data as NonNullable<R["data"]>;
}
