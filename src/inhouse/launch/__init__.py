"""What `inhouse up` launches and how: engine command lines, the plan, the supervisor.

* `engine_args` and `knob_flags`: the engines' command lines from the stack file (`vllm serve`
  and `inhouse engine`), pure; `render` puts the same arguments in Kubernetes manifests.
* `plan`: a stack → the processes to start (`ProcessSpec`s) and the engine URLs of every pool;
  pure apart from probing which launchers exist.
* `demo`: the built-in demo stack (`inhouse up` with no stack file).
* `supervisor`: the shell: starts the planned processes, waits for readiness, watches and stops
  them.

Imports run one way: `launch` imports the spec and, in `supervisor` only, the engine server's
listener check; the pure core (`render` aside, which reads `engine_args`) and the serving
shells import none of it (`lint-imports` checks it).
"""
