// Package deploy ships a model to a fleet of serving replicas.
//
// It holds three things shared by every target:
//
//   - the runtime bundle ([BuildBundle]): a deterministic zip with manifest.json, the on-phone entrypoint
//     (embedded from runtime/phone) and config.json (model resolve URL, size and sha256, context and slots,
//     candidate thread/batch settings, the NAME of the API-key variable — never a key);
//   - the [Fleet] interface that targets implement (local processes in deploy/local, Acurast phones in
//     deploy/acurast), with its JSON vocabulary [Spec], [Deployment], [Status] and [Endpoint];
//   - the deployment-state [Store]: one JSON file per deployment under a state folder, written atomically, so
//     `phonellm fleet status|stop` work from another shell. Secrets are never part of a Spec or a Deployment
//     (only the names of the variables that hold them), and the Store refuses to write a file that contains a
//     value registered with [Store.Forbid].
package deploy
