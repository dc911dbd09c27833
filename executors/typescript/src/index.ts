// @dwr-run/dwr: the TypeScript executor SDK and client of dwr, the durable
// work runtime. The wire contract it speaks is the README's "The wire
// contract" and "Executors: the protocol".
export { Client, type ConnectOptions, type ClientOptions, type CreateGoal } from "./client.js";
export { Worker, Verifier, MinLeaseMs, SDKCode, parseDuration } from "./worker.js";
export type { WorkerOptions, Handler, Check, Verdict, VerifyHandler, Logger } from "./worker.js";
export {
  Job,
  WaitError,
  DelegationFailed,
  DelegationOnFailure,
  type Result,
  type Decision,
  type ApprovalRequest,
  type Delegation,
  type Delegated,
} from "./job.js";
export { DwrError, Permanent, Failure, AbortReason, Cause, causeOf, type CauseName } from "./errors.js";
export { credentialOptions, readCredential, inboxPrefix, type Credential } from "./credentials.js";
export { actionDigest, canonicalAt, canonicalJSON, digestOf } from "./canonical.js";
export { readSigningKey, signDecision, decisionMessage, DecisionPurpose, type SigningKey } from "./signing.js";
export { putArtifact, getArtifact, mediaType, type ArtifactInfo, type ArtifactMeta } from "./artifacts.js";
export { Service, DefaultTimeoutMs, traceContextOf, type CallOptions, type TraceContext } from "./service.js";
export * from "./wire.js";
