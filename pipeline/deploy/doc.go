// Package deploy ships a model to a fleet of serving replicas.
//
// [Run] is the ship stage: it checks that the model fits the phone profile, hashes it (or takes the
// workspace's record), completes the deployment [Spec], has the [Target] ship it, sends the first chat request
// through the gateway the target started — trusting the answer only when it carries that gateway's identity
// ([GatewayIdentityHeader]) — and records the deployment in the workspace. A failed ship stops what it
// started. The targets are subpackages that import this one, so the caller passes one in Options.Target:
// deploy/local (replicas and a gateway on this machine, one supervisor for all of them) or deploy/acurast
// (phones; a dry run can be planned before the model is published).
//
// It also holds what every target shares:
//
//   - the runtime bundle ([BuildBundle], [ReadBundle]): a deterministic zip with manifest.json, the on-phone
//     entrypoint (embedded from runtime/phone) and config.json (model resolve URL, size and sha256, context
//     and slots, candidate thread/batch settings, the NAME of the API-key variable — never a key). Every name
//     in it that becomes a path is a plain file name ([ValidFileName]);
//   - the [Fleet] interface that targets implement, with its JSON vocabulary [Spec], [Deployment], [Status],
//     [Gateway] and [Endpoint];
//   - the deployment-state [Store]: one JSON file per deployment under a state folder, written atomically, so
//     `phonellm fleet status|stop|prune` work from another shell ([Prune] removes what no longer serves).
//     Secrets are never part of a Spec or a Deployment (only the names of the variables that hold them), and
//     the Store refuses to write a file that contains a value registered with [Store.Forbid].
//
// Errors classify themselves (pipeline/errors.go): [SpecError] and [BundleError] are input errors,
// [FleetError] a remote failure, [NotFitError] a failed check.
package deploy
