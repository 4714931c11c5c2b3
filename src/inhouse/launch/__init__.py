"""What `inhouse up` launches and how: engine command lines, the plan, the supervisor.

* `engine_args` and `knob_flags`: the engines' command lines from the stack file (`vllm serve`
  and `inhouse engine`), pure; `render` puts the same arguments in Kubernetes manifests.
* `plan`: a stack → the processes to start (`ProcessSpec`s) and the engine URLs of every pool;
  pure apart from probing which launchers exist.
* `demo`: the built-in demo stack (`inhouse up` with no stack file).
* `supervisor`: the shell: starts the planned processes, waits for readiness, watches and stops
  them; `listeners` tells it who answers on a port (its own child, or an impostor).
* `edge`: where Envoy is and how it starts in front of the gateway (`up --edge envoy`; its
  configuration is `render.edge`'s).

Imports run one way: `launch` imports only the spec and `errors` (it starts the gateway and
the engines as commands, never by importing them); the pure core and the serving shells import
none of it but `engine_args`' command lines (`render` puts them in manifests, the engine reads
its keep-alive variable's name); the plan, the demo stack and the command lines start no
process (`lint-imports` checks all three).
"""
