"""``envfarm/OrderDesk-v0``: a customer-service desk under written policy rules (tau-bench retail style).

Each seed draws a store database (customers, orders with items and statuses, a product catalog with
variants) and one customer's request; the first observation is the numbered POLICY followed by that request.
The database lives as a JSON file in the sandbox; every tool call is one ``python3 orderdesk_program.py``
exec. Tools check existence and format only, not the policy: an agent can break a rule, as in tau-bench.

The episode ends with ``respond(message)`` or ``end_conversation()``. Reward 1.0 only when (a) the database
read back from the sandbox equals the expected one (the correct change applied on the host, or none when the
policy says to refuse) and (b) no rule was broken (a lookup before authentication, another customer's order,
cancelling a non-pending order, ...). ``info`` names each broken rule and the state diff.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from envfarm.errors import ConfigError, ExecFailed, SandboxError, tail
from envfarm.sandbox import Sandbox

from ..core import AgentEnv, Outcome, tool, truncate
from ..meta import OrderDeskMeta
from .orderdesk_data import KINDS, DeskTask, make_task
from .orderdesk_policy import POLICY, Desk, grade

PROGRAM_PATH = "/tmp/envfarm_orderdesk.py"
DB_PATH = "/tmp/envfarm_orderdesk.json"
PROGRAM_SOURCE = Path(__file__).with_name("orderdesk_program.py").read_text()
MAX_TOOL_OUTPUT = 20_000
OP_TIMEOUT_S = 10


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArgs(_Args):
    pass


class FindCustomerArgs(_Args):
    email: str = Field("", description="The customer's email address (or give name and zip).")
    name: str = Field("", description="The customer's full name (with zip).")
    zip: str = Field("", description="The customer's zip code (with name), e.g. '80279'.")

    @model_validator(mode="after")
    def _email_or_name_zip(self) -> FindCustomerArgs:
        if not self.email and not (self.name and self.zip):
            raise ValueError("give either email, or both name and zip")
        return self


class CustomerArgs(_Args):
    customer_id: str = Field(description="A customer id from find_customer, e.g. 'mia_garcia_4516'.")


class OrderArgs(_Args):
    order_id: str = Field(description="An order id, e.g. '#W1234567'.")


class ProductArgs(_Args):
    product_id: str = Field(description="A product id from list_products or an order's items.")


class CancelArgs(OrderArgs):
    reason: Literal["no longer needed", "ordered by mistake"] = Field(description="Why it is cancelled.")


class AddressArgs(OrderArgs):
    address1: str = Field(min_length=1, description="Street and number, e.g. '12 Oak Street'.")
    address2: str = Field("", description="Apartment or suite, e.g. 'Apt 4'; empty when there is none.")
    city: str = Field(min_length=1)
    state: str = Field(min_length=1, description="Two-letter state code, e.g. 'CO'.")
    zip: str = Field(pattern=r"^\d{5}$", description="Five-digit zip code.")


class ReturnArgs(OrderArgs):
    item_ids: list[str] = Field(min_length=1, description="Item ids (from the order) to return.")
    payment_method_id: str = Field(description="Where the refund goes, e.g. 'credit_card_1234567'.")


class ExchangeArgs(OrderArgs):
    item_ids: list[str] = Field(min_length=1, description="Item ids (from the order) to exchange.")
    new_item_ids: list[str] = Field(min_length=1, description="Catalog item ids to get instead, in the same "
                                                              "order as item_ids.")

    @model_validator(mode="after")
    def _same_length(self) -> ExchangeArgs:
        if len(self.item_ids) != len(self.new_item_ids):
            raise ValueError("item_ids and new_item_ids must have the same length")
        return self


class RespondArgs(_Args):
    message: str = Field(min_length=1, description="Your final reply to the customer.")


class OrderDeskEnv(AgentEnv[DeskTask]):
    """Customer-service requests under a written policy; tools look up and change a sandboxed database."""

    forkable = True  # the episode is the sandbox plus plain Python state: AgentEnv.afork copies both
    default_max_steps = 30
    meta_type = OrderDeskMeta

    def __init__(self, difficulty: int | None = None, kind: str | None = None, **kwargs: object) -> None:
        if difficulty is not None and difficulty not in (1, 2, 3):
            raise ConfigError(f"OrderDesk difficulty must be 1, 2 or 3 (None: mixed), got {difficulty!r}")
        if kind is not None and kind not in KINDS:
            raise ConfigError(f"unknown OrderDesk kind {kind!r}; choose one of {', '.join(KINDS)} "
                              "(None: mixed)")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.difficulty, self.kind = difficulty, kind
        self.desk: Desk | None = None

    def generate(self, rng: np.random.Generator) -> DeskTask:
        return make_task(rng, self.difficulty or int(rng.integers(1, 4)), self.kind)

    def prompt(self, task: DeskTask) -> str:
        return f"{POLICY}\n\nThe customer writes:\n{task.request}"

    async def setup(self, sb: Sandbox, task: DeskTask) -> None:
        await sb.write_file(PROGRAM_PATH, PROGRAM_SOURCE)
        await sb.write_file(DB_PATH, task.db_json)
        self.desk = Desk(task.db_json)

    def oracle(self) -> list[str]:
        assert self.task is not None
        return [call.action() for call in self.task.solution]

    # --------------------------------------------------------------------------------------------- tools

    @tool("Authenticate the customer: their customer id, found by email or by full name and zip code.")
    async def find_customer(self, args: FindCustomerArgs) -> Outcome:
        return await self._op("find_customer", args)

    @tool("The customer's profile: name, email, address, payment methods and order ids.")
    async def get_customer(self, args: CustomerArgs) -> Outcome:
        return await self._op("get_customer", args)

    @tool("An order: status, items (item id, product id, options, price), payment method, address.")
    async def get_order(self, args: OrderArgs) -> Outcome:
        return await self._op("get_order", args)

    @tool("All products of the catalog (product id and name).")
    async def list_products(self, args: NoArgs) -> Outcome:
        return await self._op("list_products", args)

    @tool("A product and its variants (item id, options, price, available).")
    async def get_product(self, args: ProductArgs) -> Outcome:
        return await self._op("get_product", args)

    @tool("Cancel an order.")
    async def cancel_order(self, args: CancelArgs) -> Outcome:
        return await self._op("cancel_order", args)

    @tool("Change the shipping address of an order.")
    async def modify_address(self, args: AddressArgs) -> Outcome:
        return await self._op("modify_address", args)

    @tool("Request a return of some items of an order, refunded to the given payment method.")
    async def return_items(self, args: ReturnArgs) -> Outcome:
        return await self._op("return_items", args)

    @tool("Request an exchange of some items of an order for other catalog items.")
    async def exchange_items(self, args: ExchangeArgs) -> Outcome:
        return await self._op("exchange_items", args)

    @tool("Send your final reply to the customer. Ends the conversation (and the episode).")
    async def respond(self, args: RespondArgs) -> Outcome:
        return await self._finish(args.message)

    @tool("End the conversation without a further reply. Ends the episode.")
    async def end_conversation(self, args: NoArgs) -> Outcome:
        return await self._finish(None)

    # ------------------------------------------------------------------------------------------- helpers

    async def _op(self, op: str, args: BaseModel) -> Outcome:
        """Run one database operation in the sandbox; the host notes rules broken by a successful call."""
        assert self.sandbox is not None and self.desk is not None
        params = args.model_dump()
        violation = self.desk.check(op, params, self.steps)
        cmd = ["python3", "-I", "-S", PROGRAM_PATH, DB_PATH, op, json.dumps(params)]
        res = await self.sandbox.exec(cmd, timeout_s=OP_TIMEOUT_S)
        if res.timed_out:
            raise SandboxError(f"OrderDesk {op} timed out after {OP_TIMEOUT_S}s in {self.sandbox}")
        if res.exit_code not in (0, 1):
            raise ExecFailed(f"OrderDesk {op} exited {res.exit_code} in {self.sandbox}; stderr tail:\n"
                             f"{tail(res.stderr)}")
        ok = res.exit_code == 0
        broken = self.desk.record(op, params, self.steps, ok, violation)
        text = truncate((res.stdout if ok else res.stderr).strip(), MAX_TOOL_OUTPUT,
                        "ask for one order or product at a time")
        return Outcome(text, info={"rule_broken": broken.as_dict()} if broken else {})

    async def _finish(self, message: str | None) -> Outcome:
        assert self.sandbox is not None and self.desk is not None and self.task is not None
        raw = await self.sandbox.read_file(DB_PATH)
        try:
            actual = json.loads(raw)
        except ValueError as e:
            raise SandboxError(f"the OrderDesk database in {self.sandbox} is not valid JSON: {e}") from e
        verdict = grade(json.loads(self.task.expected_json), actual, self.desk.violations)
        problems = [f"rule {v.rule} ({v.name}) broken at step {v.step}: {v.detail}"
                    for v in verdict.violations]
        if not verdict.state_ok:
            problems.append("the database is not in the expected state: " + "; ".join(verdict.diff[:5]))
        summary = "The request was handled correctly." if verdict.reward else " ".join(problems)
        info = {"kind": self.task.kind, "expected_refusal": self.task.refuse, "state_ok": verdict.state_ok,
                "state_diff": list(verdict.diff), "violations": [v.as_dict() for v in verdict.violations],
                "rule": verdict.violations[0].name if verdict.violations else None, "message": message,
                "calls": [{"step": c.step, "name": c.name, "arguments": dict(c.arguments), "ok": c.ok}
                          for c in self.desk.calls]}
        return Outcome(f"Conversation ended. {summary}", reward=verdict.reward, done=True, info=info)
