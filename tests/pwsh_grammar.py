"""PowerShell as the tests read it: tree-sitter's grammar for the syntax, and a small table of each
cmdlet's parameters and their value types for the binding (no PowerShell here).

The table is copied from Microsoft's reference pages (learn.microsoft.com/powershell/module/...):
netsecurity/new-netfirewallhypervrule, new-netfirewallrule, remove-netfirewallhypervrule,
remove-netfirewallrule; microsoft.powershell.management/test-path, remove-item;
microsoft.powershell.utility/out-file; and about_CommonParameters (-ErrorAction). Types:
``"string"`` takes one value; ``"list"`` (String[]) one value or a comma-separated list; a tuple is
an enum's names; a cmdlet's required parameters are listed apart. A value PowerShell would not bind is an error here too: an unknown parameter, a
second argument after a parameter (``-LocalPorts 'a' 'b'``: PowerShell reports "A positional
parameter cannot be found"), a list given to a string, a name outside an enum.
"""
from __future__ import annotations

ERROR_ACTIONS = ("SilentlyContinue", "Stop", "Continue", "Ignore", "Inquire")
DIRECTION, ACTION, ENABLED = ("Inbound", "Outbound"), ("NotConfigured", "Allow", "Block"), ("True", "False")
CMDLETS = {
    "New-NetFirewallHyperVRule": {"DisplayName": "string", "Name": "string", "Direction": DIRECTION,
                                  "VMCreatorId": "string", "Protocol": "string", "LocalAddresses": "list",
                                  "LocalPorts": "list", "RemoteAddresses": "list", "RemotePorts": "list",
                                  "Action": ACTION, "Enabled": ENABLED, "RulePriority": "string",
                                  "Profiles": ("Any", "Domain", "Private", "Public", "NotApplicable")},
    "New-NetFirewallRule": {"DisplayName": "string", "Name": "string", "Description": "string",
                            "Direction": DIRECTION, "Action": ACTION, "Enabled": ENABLED, "Protocol": "string",
                            "LocalAddress": "list", "RemoteAddress": "list", "LocalPort": "list",
                            "RemotePort": "list", "Program": "string"},
    "Remove-NetFirewallHyperVRule": {"DisplayName": "list", "Name": "list"},
    "Remove-NetFirewallRule": {"DisplayName": "list", "Name": "list"},
    "Test-Path": {"Path": "list", None: "list"},            # None: the positional parameter (Path)
    "Remove-Item": {"Path": "list", None: "list"},
    "Out-File": {"FilePath": "string", "Encoding": ("ascii", "unicode", "utf8", "oem"), None: "string"},
}
COMMON = {"ErrorAction": ERROR_ACTIONS}
REQUIRED = {"New-NetFirewallHyperVRule": {"DisplayName"}, "New-NetFirewallRule": {"DisplayName"}}  # else a prompt


def parse(text: str) -> list[tuple[str, dict]]:
    """Every command in ``text``: its name and {parameter: [argument, ...]}, each argument a list of
    its values (a comma list has several; string quotes dropped); positional arguments under None.
    A syntax error fails (AssertionError)."""
    import tree_sitter_powershell
    from tree_sitter import Language, Parser
    src = text.encode()
    tree = Parser(Language(tree_sitter_powershell.language())).parse(src)
    nodes, errors, found = [tree.root_node], [], []
    while nodes:
        node = nodes.pop(0)
        if node.type == "ERROR" or node.is_missing:
            errors.append(src[node.start_byte:node.end_byte].decode())
        if node.type == "command":
            found.append(_command(node, src))
        nodes = list(node.children) + nodes
    assert errors == [], errors
    return found


def _command(command, src: bytes) -> tuple[str, dict]:
    name_node = command.child_by_field_name("command_name")
    name = src[name_node.start_byte:name_node.end_byte].decode()
    params, current = {}, None
    elements = command.child_by_field_name("command_elements")
    for element in ([] if elements is None else elements.children):
        text = src[element.start_byte:element.end_byte].decode()
        if element.type == "command_parameter":
            current = text.lstrip("-")
            params[current] = []
        elif element.type != "command_argument_sep":
            values = [src[n.start_byte:n.end_byte].decode().strip("'\"") for n in _leaves(element)]
            (params.setdefault(current, []) if current is not None and not params[current]
             else params.setdefault(None, [])).append(values or [text])
            current = None  # a second argument after a parameter is positional
    return name, params


def _leaves(node):
    if node.type in ("verbatim_string_characters", "expandable_string_literal", "generic_token"):
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


def binding_errors(name: str, params: dict) -> list[str]:
    """Why PowerShell would refuse to bind ``params`` to cmdlet ``name`` (``[]``: it binds)."""
    table = {**CMDLETS[name], **COMMON}
    errors = [f"{name}: -{param} is required (PowerShell would stop and prompt for it)"
              for param in sorted(REQUIRED.get(name, set()) - set(params))]
    for param, arguments in params.items():
        kind = table.get(param)
        if kind is None:
            errors.append(f"{name}: " + (f"no parameter -{param}" if param else
                                         f"a positional parameter cannot be found for {arguments}"))
            continue
        if len(arguments) != 1:
            errors.append(f"{name} -{param}: {len(arguments)} arguments, PowerShell binds one")
            continue
        [values] = arguments
        if kind != "list" and len(values) != 1:
            errors.append(f"{name} -{param}: a list {values} given to a single value")
        elif isinstance(kind, tuple) and values[0].lower() not in {v.lower() for v in kind}:
            errors.append(f"{name} -{param}: {values[0]!r} is not one of {kind}")
    return errors


def flat(params: dict) -> dict:
    """{parameter: values} for reading a bound command (each parameter's one argument's values)."""
    return {param: [v for argument in arguments for v in argument] for param, arguments in params.items()}
