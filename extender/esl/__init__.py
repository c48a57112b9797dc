"""ESCHER Scheduling Libraries (ESLs) and the typed client of the policy API they use.

An ESL turns a scheduling intent ("co-locate these", "gang of 8") into ephemeral resources
through `set_resource` / `get_cluster_state`, and tells the application what its pods must
request. `extender.esl.client.PolicyClient` is how they reach the extender's policy API.
"""
