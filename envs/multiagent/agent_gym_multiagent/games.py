"""The rules of the two-player games, as plain data a tokenizer never touches.

TicTacToe, Kuhn Poker and Connect Four are OpenSpiel's games (``pyspiel``): this module only names
their moves in words a model can write (cells ``1``-``9``, columns ``1``-``7``, ``pass``/``bet``) and
describes their states. Simple Negotiation, which OpenSpiel does not have, is written here.

A :class:`GameState` is one game in progress. It is picklable and deep-copyable: an OpenSpiel state
is kept as its action history (chance outcomes included) and rebuilt from it on demand, so a snapshot
of an env holds plain lists. Every state offers:

- ``current``: the index of the player to move (``None`` once the game is over);
- ``play(player, move)``: apply a move written as text; returns ``None`` or why the move is illegal
  (then nothing changed);
- ``returns()``: each player's result once the game is over (zero-sum);
- ``view(player)``: what that player sees (the board, its own card, its own resources);
- ``legal_moves(player)``: the moves it may write now (for a prompt and for scripted opponents);
- ``heuristic_move(player, rng)``: a simple rule-based move, for the ``"heuristic"`` opponent.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "ENV_IDS",
    "GAMES",
    "ConnectFourState",
    "GameState",
    "SpielState",
    "load_pyspiel",
    "KuhnPokerState",
    "NegotiationState",
    "TicTacToeState",
    "new_game",
]


class GameState(ABC):
    """One game in progress (see the module docstring)."""

    #: The game's key in :data:`GAMES` (``"tictactoe"``) and its prompt templates' prefix.
    name: ClassVar[str] = ""
    #: The game's name in env ids and messages (``"TicTacToe"``).
    title: ClassVar[str] = ""
    #: The players' role names, in turn order of the first move.
    roles: ClassVar[tuple[str, str]] = ("player_0", "player_1")
    #: The most moves one player makes in a game (a single-agent view's default ``max_turns``).
    most_moves: ClassVar[int] = 1
    #: The default ``max_context_tokens`` of a player's context (a long game needs more).
    context_tokens: ClassVar[int] = 4096

    @classmethod
    def new(cls, rng: np.random.Generator, **options: Any) -> GameState:
        """A fresh game, its chance (cards, resources) drawn from ``rng``; ``options``: the game's own
        settings (Negotiation's ``max_moves``), none for the others."""
        if options:
            raise TypeError(f"{cls.title} takes no game options, got {sorted(options)}")
        return cls(rng)  # type: ignore[call-arg]  # the concrete games take the generator

    def prompt_variables(self) -> dict[str, Any]:
        """Extra variables of the system prompt's template (Negotiation: ``max_moves``)."""
        return {}

    def max_moves_of(self, player: int) -> int:
        """The most moves ``player`` makes in this game."""
        return self.most_moves

    @property
    @abstractmethod
    def current(self) -> int | None: ...

    @abstractmethod
    def play(self, player: int, move: str) -> str | None:
        """Apply ``move`` (the text of a ``<move>`` tag) for ``player``; ``None``, or why it is illegal."""

    @abstractmethod
    def returns(self) -> list[float]: ...

    @abstractmethod
    def view(self, player: int) -> str: ...

    @abstractmethod
    def legal_moves(self, player: int) -> list[str]: ...

    @abstractmethod
    def heuristic_move(self, player: int, rng: np.random.Generator) -> str: ...

    def random_move(self, player: int, rng: np.random.Generator) -> str:
        moves = self.legal_moves(player)
        return moves[int(rng.integers(len(moves)))]

    def role_name(self, player: int) -> str:
        """How the messages name ``player``: its role (``X`` and ``O`` on a grid)."""
        return self.roles[player]

    def describe(self, player: int, move: str) -> str:
        """The public sentence for ``player``'s (legal, applied) ``move``, seen by both players."""
        return f"{self.role_name(player)} played {move}."

    @property
    def over(self) -> bool:
        return self.current is None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.view(0)!r})"


# -- OpenSpiel games ---------------------------------------------------------------------------------


def load_pyspiel(title: str) -> Any:
    """OpenSpiel's module, or an ImportError that says how to get it."""
    try:
        import pyspiel
    except ImportError as exc:
        raise ImportError(
            f"{title} plays by OpenSpiel's rules: pip install open_spiel (wheels for CPython >= 3.11 on Linux "
            "and macOS; agent-r1-gym-multiagent installs it there). Negotiation needs no OpenSpiel."
        ) from exc
    return pyspiel


class SpielState(GameState):
    """An OpenSpiel game kept as its action history; chance nodes are resolved with ``rng`` at start."""

    spiel_name: ClassVar[str] = ""

    def __init__(self, rng: np.random.Generator):
        self.history: list[int] = []
        self._state: Any = None
        state = self.state
        while state.is_chance_node():
            outcomes, probs = zip(*state.chance_outcomes())
            action = int(outcomes[int(rng.choice(len(outcomes), p=np.asarray(probs) / sum(probs)))])
            self._apply(action)

    @property
    def state(self) -> Any:
        if self._state is None:
            pyspiel = load_pyspiel(self.title)
            state = pyspiel.load_game(self.spiel_name).new_initial_state()
            for action in self.history:
                state.apply_action(action)
            self._state = state
        return self._state

    def _apply(self, action: int) -> None:
        self.state.apply_action(action)
        self.history.append(action)

    def __getstate__(self) -> dict[str, Any]:
        # The C++ state is rebuilt from the history: a snapshot holds plain ints.
        return {k: v for k, v in self.__dict__.items() if k != "_state"} | {"_state": None}

    def __deepcopy__(self, memo: dict[int, Any]) -> SpielState:
        new = object.__new__(type(self))
        new.__dict__.update(self.__getstate__())
        new.history = list(self.history)
        return new

    @property
    def current(self) -> int | None:
        state = self.state
        return None if state.is_terminal() else int(state.current_player())

    def returns(self) -> list[float]:
        return [float(r) for r in self.state.returns()]

    @abstractmethod
    def action_of(self, move: str) -> tuple[int | None, str | None]:
        """The OpenSpiel action a move's text names, or why there is none."""

    def play(self, player: int, move: str) -> str | None:
        if self.current != player:
            return f"it is not {self.role_name(player)}'s turn"
        action, error = self.action_of(move)
        if error is not None or action is None:
            return error or f"unknown move {move!r}"
        if action not in self.state.legal_actions():
            return f"{move.strip()} is not a legal move now (legal: {', '.join(self.legal_moves(player))})"
        self._apply(action)
        return None


class _GridState(SpielState):
    """TicTacToe and Connect Four: a grid of ``x``, ``o`` and ``.`` read from OpenSpiel's observation."""

    roles: ClassVar[tuple[str, str]] = ("x", "o")
    rows: ClassVar[int] = 3
    cols: ClassVar[int] = 3
    line: ClassVar[int] = 3
    word: ClassVar[str] = "cell"

    def grid(self) -> list[list[str]]:
        text = str(self.state.observation_string(0)).strip().splitlines()
        return [list(row.strip()) for row in text][: self.rows]

    def action_of(self, move: str) -> tuple[int | None, str | None]:
        words = re.findall(r"\d+", move)
        top = self.rows * self.cols if self.word == "cell" else self.cols
        if len(words) != 1:
            return None, f"write one {self.word} number from 1 to {top}, got {move.strip()[:40]!r}"
        n = int(words[0])
        if not 1 <= n <= top:
            return None, f"{self.word} {n} does not exist (1 to {top})"
        return n - 1, None

    def legal_moves(self, player: int) -> list[str]:
        return [str(a + 1) for a in self.state.legal_actions()] if self.current == player else []

    def role_name(self, player: int) -> str:
        return self.roles[player].upper()

    def describe(self, player: int, move: str) -> str:
        n = re.findall(r"\d+", move)[0]
        return f"{self.role_name(player)} played {self.word} {int(n)}."

    def _wins_with(self, grid: list[list[str]], mark: str) -> bool:
        for r in range(self.rows):
            for c in range(self.cols):
                for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                    cells = [(r + i * dr, c + i * dc) for i in range(self.line)]
                    if all(0 <= y < self.rows and 0 <= x < self.cols and grid[y][x] == mark for y, x in cells):
                        return True
        return False

    @abstractmethod
    def _after(self, grid: list[list[str]], action: int, mark: str) -> list[list[str]]:
        """The grid after ``mark`` takes ``action``."""

    @abstractmethod
    def _preference(self, action: int) -> float:
        """Lower is better: where the heuristic plays when nothing wins or blocks."""

    def heuristic_move(self, player: int, rng: np.random.Generator) -> str:
        """Win now if possible, else block the opponent's win, else the most central free move."""
        legal = [int(a) for a in self.state.legal_actions()]
        grid = self.grid()
        mine, theirs = self.roles[player], self.roles[1 - player]
        for mark in (mine, theirs):
            hits = [a for a in legal if self._wins_with(self._after(grid, a, mark), mark)]
            if hits:
                return str(hits[int(rng.integers(len(hits)))] + 1)
        best = min(self._preference(a) for a in legal)
        choice = [a for a in legal if self._preference(a) == best]
        return str(choice[int(rng.integers(len(choice)))] + 1)


class TicTacToeState(_GridState):
    """TicTacToe (OpenSpiel ``tic_tac_toe``): ``x`` moves first; a move is a cell number 1-9, row by row."""

    name, title, spiel_name, most_moves = "tictactoe", "TicTacToe", "tic_tac_toe", 5

    def view(self, player: int) -> str:
        grid = self.grid()
        rows = [" ".join(grid[r][c].upper() if grid[r][c] != "." else str(r * 3 + c + 1) for c in range(3)) for r in range(3)]
        return "\n".join(rows)

    def _after(self, grid: list[list[str]], action: int, mark: str) -> list[list[str]]:
        new = [row[:] for row in grid]
        new[action // 3][action % 3] = mark
        return new

    def _preference(self, action: int) -> float:
        return 0.0 if action == 4 else 1.0 if action in (0, 2, 6, 8) else 2.0


class ConnectFourState(_GridState):
    """Connect Four (OpenSpiel ``connect_four``, 6 rows x 7 columns): a move is a column number 1-7."""

    name, title, spiel_name, most_moves, context_tokens = "connectfour", "ConnectFour", "connect_four", 21, 16384
    rows, cols, line, word = 6, 7, 4, "column"

    def view(self, player: int) -> str:
        grid = self.grid()  # OpenSpiel prints the top row first, as here
        lines = [" ".join(cell.upper() for cell in row) for row in grid]
        return "\n".join([*lines, " ".join(str(c + 1) for c in range(self.cols))])

    def _after(self, grid: list[list[str]], action: int, mark: str) -> list[list[str]]:
        new = [row[:] for row in grid]
        for r in range(self.rows - 1, -1, -1):
            if new[r][action] == ".":
                new[r][action] = mark
                break
        return new

    def _preference(self, action: int) -> float:
        return abs(action - 3)


_CARDS = ("J", "Q", "K")


class KuhnPokerState(SpielState):
    """Kuhn Poker (OpenSpiel ``kuhn_poker``): a deck of J, Q, K; each player antes 1 chip and gets one
    card; moves ``pass`` (check or fold) and ``bet`` (bet or call, 1 chip). Returns: the chips won."""

    name, title, spiel_name, most_moves = "kuhnpoker", "KuhnPoker", "kuhn_poker", 2
    _WORDS: ClassVar[dict[str, int]] = {"pass": 0, "check": 0, "fold": 0, "bet": 1, "call": 1}

    def card(self, player: int) -> str:
        return _CARDS[self.history[player]]

    def action_of(self, move: str) -> tuple[int | None, str | None]:
        word = move.strip().lower().strip(".!")
        if word not in self._WORDS:
            return None, f"write pass or bet, got {move.strip()[:40]!r}"
        return self._WORDS[word], None

    def _facing_bet(self) -> bool:
        return 1 in self.history[2:]

    def legal_moves(self, player: int) -> list[str]:
        return ["pass", "bet"] if self.current == player else []

    def describe(self, player: int, move: str) -> str:
        action = self._WORDS[move.strip().lower().strip(".!")]
        # The move was applied already: a bet that answered a bet is a call, a pass after a bet a fold.
        before = self.history[2:-1]
        if action == 1:
            verb = "calls" if 1 in before else "bets 1 chip"
        else:
            verb = "folds" if 1 in before else "checks"
        return f"{self.roles[player]} {verb}."

    def view(self, player: int) -> str:
        lines = [f"Your card: {self.card(player)}.", f"Pot: {2 + sum(self.history[2:])} chips."]
        if self.over:
            lines.append(f"Cards: {self.roles[0]} {self.card(0)}, {self.roles[1]} {self.card(1)}.")
        return "\n".join(lines)

    def heuristic_move(self, player: int, rng: np.random.Generator) -> str:
        """Bet or call with the king, otherwise check or fold."""
        return "bet" if self.card(player) == "K" else "pass"


# -- Simple Negotiation (not in OpenSpiel) ---------------------------------------------------------------

RESOURCES = ("wood", "wheat", "sheep", "brick", "ore")
_AMOUNT = re.compile(r"(\d+)\s*([a-z]+)")


@dataclass
class Offer:
    """A trade ``player`` proposes: it gives ``give`` and gets ``get`` (resource -> amount)."""

    player: int
    give: dict[str, int]
    get: dict[str, int]

    def text(self) -> str:
        def side(d: dict[str, int]) -> str:
            return ", ".join(f"{n} {r}" for r, n in d.items())

        return f"{side(self.give)} for {side(self.get)}"


def _parse_side(text: str) -> tuple[dict[str, int], str | None]:
    side: dict[str, int] = {}
    rest = text.lower()
    for n, word in _AMOUNT.findall(rest):
        resource = word.rstrip("s") if word.rstrip("s") in RESOURCES else word
        if resource not in RESOURCES:
            return {}, f"unknown resource {word!r} (one of {', '.join(RESOURCES)})"
        if int(n) <= 0:
            return {}, "amounts must be positive"
        side[resource] = side.get(resource, 0) + int(n)
    if not side:
        return {}, f"no '<number> <resource>' in {text.strip()[:40]!r}"
    return side, None


@dataclass
class NegotiationState(GameState):
    """Simple Negotiation: two players each hold five resources and value them differently (values
    private). In turn, for ``max_moves`` moves in all, a player writes ``offer: 2 wood, 1 ore for 3
    sheep`` (it gives the left side and gets the right), ``accept`` or ``deny`` (the offer it was
    made) or ``pass``. An accepted offer swaps the resources. At the end each player's gain is the
    value, at its own prices, of what it holds minus what it started with; the larger gain wins
    (returns +1 / -1, a tie 0 / 0)."""

    name: ClassVar[str] = "negotiation"
    title: ClassVar[str] = "Negotiation"
    inventory: list[dict[str, int]] = field(default_factory=list)
    values: list[dict[str, int]] = field(default_factory=list)
    start: list[dict[str, int]] = field(default_factory=list)
    max_moves: int = 8
    moves: int = 0
    pending: Offer | None = None
    trades: int = 0

    @classmethod
    def new(cls, rng: np.random.Generator, **options: Any) -> NegotiationState:
        unknown = set(options) - {"max_moves"}
        if unknown:
            raise TypeError(f"Negotiation's only game option is max_moves, got {sorted(unknown)}")
        return cls.deal(rng, **options)

    @classmethod
    def deal(cls, rng: np.random.Generator, max_moves: int = 8) -> NegotiationState:
        if int(max_moves) < 2 or int(max_moves) % 2:
            raise ValueError(f"max_moves must be even and >= 2 (both players move as often), got {max_moves}")
        inventory = [{r: int(rng.integers(1, 6)) for r in RESOURCES} for _ in range(2)]
        values = [{r: int(rng.integers(1, 10)) for r in RESOURCES} for _ in range(2)]
        return cls(inventory, values, [dict(i) for i in inventory], max_moves=int(max_moves))

    def prompt_variables(self) -> dict[str, Any]:
        return {"max_moves": self.max_moves}

    def max_moves_of(self, player: int) -> int:
        return (self.max_moves + 1 - player) // 2

    @property
    def current(self) -> int | None:
        return None if self.moves >= self.max_moves else self.moves % 2

    def worth(self, player: int, inventory: dict[str, int] | None = None) -> int:
        held = self.inventory[player] if inventory is None else inventory
        return sum(self.values[player][r] * n for r, n in held.items())

    def gain(self, player: int) -> int:
        return self.worth(player) - self.worth(player, self.start[player])

    def returns(self) -> list[float]:
        g0, g1 = self.gain(0), self.gain(1)
        return [0.0, 0.0] if g0 == g1 else ([1.0, -1.0] if g0 > g1 else [-1.0, 1.0])

    def _read(self, player: int, move: str) -> tuple[str, Offer | None, str | None]:
        text = move.strip().lower()
        word = text.split(":")[0].split()[0].strip(".!") if text else ""
        if word in ("accept", "deny", "pass") and text.strip(".! ") == word:
            if word != "pass" and (self.pending is None or self.pending.player == player):
                return word, None, f"there is no offer to {word} (write an offer or pass)"
            return word, None, None
        if word == "offer":
            body = text.split(":", 1)[1] if ":" in text else text[len("offer"):]
            if " for " not in f" {body} ":
                return word, None, "write an offer as 'offer: 2 wood for 1 ore' (you give the left side)"
            left, right = body.split(" for ", 1) if " for " in body else ("", body)
            give, error = _parse_side(left)
            get, error2 = _parse_side(right)
            if error or error2:
                return word, None, error or error2
            if set(give) & set(get):
                return word, None, "a resource cannot be on both sides of an offer"
            short = [r for r, n in give.items() if self.inventory[player][r] < n]
            if short:
                return word, None, f"you have only {self.inventory[player][short[0]]} {short[0]}"
            return word, Offer(player, give, get), None
        return word, None, f"write offer: ..., accept, deny or pass, got {move.strip()[:40]!r}"

    def play(self, player: int, move: str) -> str | None:
        if self.current != player:
            return f"it is not {self.roles[player]}'s turn"
        word, offer, error = self._read(player, move)
        if error is not None:
            return error
        if word == "accept":
            assert self.pending is not None
            short = [r for r, n in self.pending.get.items() if self.inventory[player][r] < n]
            if short:
                return f"you have only {self.inventory[player][short[0]]} {short[0]}, so you cannot accept"
            other = self.pending.player
            for r, n in self.pending.give.items():
                self.inventory[other][r] -= n
                self.inventory[player][r] += n
            for r, n in self.pending.get.items():
                self.inventory[player][r] -= n
                self.inventory[other][r] += n
            self.trades += 1
        self.pending = offer if word == "offer" else None
        self.moves += 1
        return None

    def legal_moves(self, player: int) -> list[str]:
        if self.current != player:
            return []
        moves = ["offer: <amounts> for <amounts>", "pass"]
        if self.pending is not None and self.pending.player != player:
            moves[1:1] = ["accept", "deny"]
        return moves

    def describe(self, player: int, move: str) -> str:
        who = self.roles[player]
        if self.pending is not None and self.pending.player == player:
            return f"{who} offers {self.pending.text()}."
        word = move.strip().lower().strip(".! ")
        return {"accept": f"{who} accepts the offer.", "deny": f"{who} denies the offer."}.get(word, f"{who} passes.")

    def view(self, player: int) -> str:
        held = ", ".join(f"{self.inventory[player][r]} {r} (worth {self.values[player][r]} each)" for r in RESOURCES)
        lines = [f"You hold: {held}.", f"Your total worth: {self.worth(player)} (you started with {self.worth(player, self.start[player])})."]
        if self.pending is not None and self.pending.player != player:
            o = self.pending
            lines.append(f"Offer to you: you give {', '.join(f'{n} {r}' for r, n in o.get.items())} "
                         f"and get {', '.join(f'{n} {r}' for r, n in o.give.items())}.")
        lines.append(f"Moves left in the game: {self.max_moves - self.moves}.")
        return "\n".join(lines)

    def _offer_gain(self, player: int, offer: Offer) -> int:
        gets, gives = offer.give, offer.get  # seen from the player the offer is made to
        return sum(self.values[player][r] * n for r, n in gets.items()) - sum(self.values[player][r] * n for r, n in gives.items())

    def heuristic_move(self, player: int, rng: np.random.Generator) -> str:
        """Accept an offer that gains at its own prices, deny one that does not; otherwise offer one
        of its cheapest resources for one of its dearest."""
        if self.pending is not None and self.pending.player != player:
            ok = self._offer_gain(player, self.pending) > 0 and all(
                self.inventory[player][r] >= n for r, n in self.pending.get.items())
            return "accept" if ok else "deny"
        owned = [r for r in RESOURCES if self.inventory[player][r] > 0]
        cheap = min(owned, key=lambda r: (self.values[player][r], r))
        dear = max((r for r in RESOURCES if r != cheap), key=lambda r: (self.values[player][r], r))
        return f"offer: 1 {cheap} for 1 {dear}"

    def random_move(self, player: int, rng: np.random.Generator) -> str:
        choices = ["pass", "offer"]
        if self.pending is not None and self.pending.player != player:
            choices += ["accept", "deny"]
        word = choices[int(rng.integers(len(choices)))]
        if word != "offer":
            return word
        owned = [r for r in RESOURCES if self.inventory[player][r] > 0]
        give = owned[int(rng.integers(len(owned)))]
        get = [r for r in RESOURCES if r != give][int(rng.integers(len(RESOURCES) - 1))]
        return f"offer: 1 {give} for 1 {get}"


#: Game name -> its state class.
GAMES: dict[str, type[GameState]] = {
    cls.name: cls for cls in (TicTacToeState, KuhnPokerState, ConnectFourState, NegotiationState)
}
#: Game name -> the id of its single-agent view.
ENV_IDS: dict[str, str] = {name: f"AgentR1/{cls.title}-v0" for name, cls in GAMES.items()}


def new_game(name: str, rng: np.random.Generator, **options: Any) -> GameState:
    """A fresh game of ``name`` (a key of :data:`GAMES`), its chance (cards, resources) drawn from ``rng``."""
    if name not in GAMES:
        raise ValueError(f"unknown game {name!r}; known: {', '.join(GAMES)}")
    return GAMES[name].new(rng, **options)
