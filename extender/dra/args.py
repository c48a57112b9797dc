"""The dra mode's args (settings.dra; ESCHER_DRA_*, `serve --dra-*`), validated here.

Read by the ResourceSlice publisher (extender.dra), which the composition root of the
Kubernetes side (extender.cluster.build) builds in mode dra.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from extender.core.args import Args
from extender.core.errors import InvalidValue
from extender.core.names import check_domain


class DraArgs(Args):
    """Under which driver, and how, the resources are published as DRA devices."""

    driver: str = Field(
        "",
        max_length=63,
        description="mode dra: the DRA driver name the ResourceSlices are published under "
        "(default: resource_domain)",
    )
    skip_node_operations: bool = Field(
        False,
        description="mode dra: publish the slices with skipNodeOperations ['*'], so kubelets "
        "call no DRA plugin for these devices (KEP-5945: the DRAOptionalNodeOperations gate, "
        "alpha in 1.37, on the API server and the kubelets); off: each real node needs a "
        "kubelet plugin of the driver, a no-op one suffices (kwok nodes need none)",
    )
    max_slices: int = Field(
        16,
        ge=1,
        le=1024,
        description="mode dra: ResourceSlices per node and resource at most (a pool of one "
        "slice of 128 devices each): a larger capacity is refused with 422",
    )

    @field_validator("driver")
    @classmethod
    def _driver(cls, v: str) -> str:
        # A DRA driver name is a DNS subdomain of at most 63 characters, as the domain.
        try:
            return check_domain(v) if v else v
        except InvalidValue as e:
            raise ValueError(str(e).replace("resource domain", "DRA driver")) from None

    def driver_name(self, domain: str) -> str:
        """The DRA driver the dra mode publishes under: `driver`, else the resource domain."""
        return self.driver or domain
