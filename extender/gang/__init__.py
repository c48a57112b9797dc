"""Gang scheduling in the extender: all-or-nothing placement of a gang's members.

The whole feature lives here, with its lifecycle: a gang is created when its first member
appears and destroyed when its last member is gone.

  spec      the declaration on the members' labels and annotations
  plan      a node for every member at once (pure)
  manager   the gangs' state: members from the pod informer, reservations, expiry
  barrier   members wait at bind until the gang's minimum is there
  plugin    the filter plugin (listed in extender.scheduling.registry)
  status    what GET /v1/gangs shows

docs/gangs.md explains how all-or-nothing holds and how to declare a gang.
"""
