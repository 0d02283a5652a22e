// Generated from the OpenAPI document of `turnlake serve` by openapi-typescript.
// Do not edit: regenerate with `make ts-types` (or `npm run types` in clients/typescript).
export interface paths {
    "/v1/turns": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Record Turns
         * @description Record turns of the key's tenant (recorder or admin keys). Each turn's outcome is
         *     `accepted`, `duplicate` (its tenant/conversation/turn ids are recorded already) or
         *     `rejected` (with the reason and the path of the bad field); the answer comes only after
         *     every accepted turn is durable.
         */
        post: operations["record_turns_v1_turns_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/search": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Search
         * @description Hybrid search (semantic + BM25 + trigram, fused, with a recency lift) within what the
         *     key may read: a user key its own user's turns, an analyst or admin key its tenant.
         */
        post: operations["search_v1_search_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/catalog": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Catalog
         * @description A conversation's turns in order, or turns looked up by position or time phrase; one
         *     page of them (``next_cursor`` asks for the next).
         */
        get: operations["catalog_v1_catalog_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/conversations": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Conversations
         * @description Conversations with at least one live turn, most recent activity first; one page of
         *     them (``next_cursor`` asks for the next).
         */
        get: operations["conversations_v1_conversations_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/conversations/{conversation}/turns/{turn}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Turn
         * @description One turn materialized from its TurnLog (the `turn show --json` shape): messages, file
         *     cards, steps, citations, events.
         */
        get: operations["turn_v1_conversations__conversation__turns__turn__get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/conversations/{conversation}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Erase Conversation
         * @description Erase one conversation of the key's tenant now, as `turnlake erase` (admin keys).
         */
        delete: operations["erase_conversation_v1_conversations__conversation__delete"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Erase User
         * @description Erase everything of one user of the key's tenant now (admin keys).
         */
        delete: operations["erase_user_v1_users__user__delete"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/refs/{ref}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Resolve Ref
         * @description Resolve a conv:* address the key may read and that is retained. An end user's key gets
         *     one refusal (403) for another user's object and for none; an expired object is 410.
         */
        get: operations["resolve_ref_v1_refs__ref__get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/pull": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Pull
         * @description Materialize the targets the key may read into the workspace; a ref that expired or
         *     that the key may not read is reported per item and the rest is pulled.
         */
        post: operations["pull_v1_pull_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/healthz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Healthz
         * @description Liveness: answers without a key once the process serves its lake, starting up or not;
         *     says how far the start-up is and what waits in the writer.
         */
        get: operations["healthz_healthz_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/readyz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Readyz
         * @description Readiness: 200 once every turn acknowledged before the start (by this lake's servers,
         *     dead ones included) is committed and searchable; 503 with the start-up's phase, progress
         *     and last problem until then. Load balancers send searches only to ready servers.
         */
        get: operations["readyz_readyz_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Metrics
         * @description Request latency per route, turns recorded, commit batch sizes, ack→searchable time,
         *     stale partitions, the writer's backlog and the start-up's time.
         */
        get: operations["metrics_metrics_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /**
         * CatalogAnswer
         * @description ``catalog --json`` and ``GET /v1/catalog`` (one page of it).
         */
        CatalogAnswer: {
            /** Turns */
            turns: components["schemas"]["CatalogTurnModel"][];
            /**
             * Next Cursor
             * @description Pass as `cursor` for the next page; absent on the last page.
             */
            next_cursor?: string | null;
        };
        /**
         * CatalogTurnModel
         * @description One turn in its conversation's order.
         */
        CatalogTurnModel: {
            /** Tenant */
            tenant: string;
            /** User Id */
            user_id: string;
            /** Conversation Id */
            conversation_id: string;
            /** Turn Id */
            turn_id: string;
            /** Ordinal */
            ordinal: number;
            /** Started At */
            started_at: string;
            /** Ended At */
            ended_at: string;
            /** Writer */
            writer: string;
            /** First User Message */
            first_user_message: string;
            /** Last Completion */
            last_completion: string;
        };
        /**
         * ConversationEntry
         * @description A conversation as listed from its conv.timeline.v1.
         */
        ConversationEntry: {
            /** Tenant */
            tenant: string;
            /** Conversation Id */
            conversation_id: string;
            /** User Id */
            user_id: string;
            /** App */
            app: string;
            /** Agent */
            agent: string;
            /** Title */
            title: string | null;
            /**
             * Started At
             * Format: date-time
             */
            started_at: string;
            /**
             * Last Activity At
             * Format: date-time
             */
            last_activity_at: string;
            /** Turn Count */
            turn_count: number;
            /** Last Turn Id */
            last_turn_id: string;
        };
        /**
         * ConversationsAnswer
         * @description ``GET /v1/conversations``: one page, most recent activity first.
         */
        ConversationsAnswer: {
            /** Conversations */
            conversations: components["schemas"]["ConversationEntry"][];
            /**
             * Next Cursor
             * @description Pass as `cursor` for the next page; absent on the last page.
             */
            next_cursor?: string | null;
        };
        /**
         * ErasureAnswer
         * @description ``DELETE /v1/conversations/{c}`` and ``DELETE /v1/users/{u}``: the erase job, what it
         *     planned to remove (counts) and what it removed (rows deleted per table).
         */
        ErasureAnswer: {
            /** Job Id */
            job_id: string;
            /** Counts */
            counts: {
                [key: string]: number;
            };
            /** Deleted */
            deleted: {
                [key: string]: number;
            };
        };
        /**
         * ErrorAnswer
         * @description The one error shape of the service.
         */
        ErrorAnswer: {
            error: components["schemas"]["ErrorDetail"];
        };
        /**
         * ErrorDetail
         * @description What went wrong, and where.
         */
        ErrorDetail: {
            /** Code */
            code: string;
            /** Message */
            message: string;
            /** Field */
            field?: string | null;
        };
        /**
         * FileCard
         * @description A hosted file as shown on a turn: its ref, name, type and size.
         */
        FileCard: {
            /** Ref */
            ref: string;
            /** Name */
            name: string;
            /** Path */
            path: string;
            /** Mime */
            mime: string;
            /** Size */
            size: number;
            /** Sha256 */
            sha256: string;
            /** Description */
            description: string | null;
            /**
             * Expires At
             * Format: date-time
             */
            expires_at: string;
        };
        /**
         * GeneratorRank
         * @description A turn's best row in one generator: its 1-based rank and the generator's score.
         */
        GeneratorRank: {
            /** Rank */
            rank: number;
            /** Score */
            score: number;
        };
        /**
         * Hit
         * @description One matched turn, with the evidence of how it scored.
         */
        Hit: {
            /** Tenant */
            tenant: string;
            /** User Id */
            user_id: string;
            /** Conversation Id */
            conversation_id: string;
            /** Turn Id */
            turn_id: string;
            /**
             * Turn At
             * @description ISO 8601
             */
            turn_at: string;
            /** Role */
            role: string;
            /** Text */
            text: string;
            /** Row Id */
            row_id: string;
            /** Ranks */
            ranks: {
                [key: string]: components["schemas"]["GeneratorRank"] | null;
            };
            /**
             * Fused
             * @description The turn's fused score: reciprocal-rank fusion of the arms' rankings, with rrf_score's bonus when the request fuses so (the default); score = fused × lift.
             */
            fused: number;
            /** Lift */
            lift: number;
            /** Score */
            score: number;
            /**
             * Relevance
             * @description How likely the turn is a real match, 0 to 1; hits below the request's min_relevance are left out.
             */
            relevance: number;
            /** Snippets */
            snippets: {
                [key: string]: string;
            };
            /**
             * Address
             * @description The address of the matched row (conv:so:, conv:ws: or conv:su: as its role says), with its turn's edition; resolve it with get_ref or GET /v1/refs/{ref}. Null when the turn is no longer recorded.
             */
            address?: string | null;
            /**
             * Turn Address
             * @description The address of the turn's record (conv:ar:...record@edition).
             */
            turn_address?: string | null;
            /**
             * Agent
             * @description The agent that recorded the turn (claude-code, codex, gemini-cli, ...).
             */
            agent?: string | null;
            /**
             * App
             * @description The app the turn was recorded in.
             */
            app?: string | null;
        };
        /**
         * MaterializedTurn
         * @description A whole turn rebuilt from its TurnLog, with file cards and recorded events.
         */
        MaterializedTurn: {
            /** Tenant */
            tenant: string;
            /** User Id */
            user_id: string;
            /** Conversation Id */
            conversation_id: string;
            /** Turn Id */
            turn_id: string;
            /** App */
            app: string;
            /** Agent */
            agent: string;
            /** Writer */
            writer: string;
            /** Title */
            title: string | null;
            /** Ordinal */
            ordinal: number;
            /**
             * Started At
             * Format: date-time
             */
            started_at: string;
            /**
             * Ended At
             * Format: date-time
             */
            ended_at: string;
            /** Submissions */
            submissions: {
                [key: string]: unknown;
            }[];
            /** Completion */
            completion: {
                [key: string]: unknown;
            };
            /** Attachments */
            attachments: {
                [key: string]: unknown;
            }[];
            /** Files */
            files: components["schemas"]["FileCard"][];
            /** Steps */
            steps: {
                [key: string]: unknown;
            }[];
            /** Citations */
            citations: {
                [key: string]: unknown;
            }[];
            /** Events */
            events: {
                [key: string]: unknown;
            }[];
            /** Usage */
            usage: {
                [key: string]: unknown;
            } | null;
            /** Feedback */
            feedback: {
                [key: string]: unknown;
            } | null;
            /** Summary */
            summary?: string | null;
            /** Anchors */
            anchors?: string[];
            /** Notes */
            notes?: string[];
            /**
             * Completion Status
             * @default completed
             */
            completion_status?: string;
            /** Edition */
            edition?: string | null;
            addresses?: components["schemas"]["TurnAddresses"] | null;
            /** Mentions */
            mentions?: components["schemas"]["Mention"][];
        };
        /**
         * Mention
         * @description A ref written in a turn's text: where, the ref as written, and what it leads to
         *     (``address``: the canonical address of the object found, with its edition).
         */
        Mention: {
            /** Source */
            source: string;
            /** Ref */
            ref: string;
            /**
             * Status
             * @enum {string}
             */
            status: "found" | "missing" | "expired" | "invalid";
            /** Address */
            address?: string | null;
            /** Reason */
            reason?: string | null;
        };
        /**
         * NamedTimeAnswer
         * @description A time the query named, whose turns the search lifted: the words and their range.
         */
        NamedTimeAnswer: {
            /**
             * Phrase
             * @description The query's words, as written.
             */
            phrase: string;
            /**
             * Start
             * @description The range's first instant (UTC).
             */
            start: string;
            /**
             * End
             * @description The instant after the range (UTC).
             */
            end: string;
        };
        /**
         * PullAnswer
         * @description What the pull did per file; ``ok`` is true when every file with bytes was pulled.
         *     ``into`` and ``manifest`` are relative to the server's workspace (its own paths are
         *     not the caller's business).
         */
        PullAnswer: {
            /** Into */
            into: string;
            /** Manifest */
            manifest: string;
            /** Ok */
            ok: boolean;
            /** Items */
            items: components["schemas"]["PullItem"][];
        };
        /**
         * PullBody
         * @description ``POST /v1/pull``: what to pull, and where below the server's workspace.
         */
        PullBody: {
            /**
             * Targets
             * @description conv:fi: refs, or turns as 'CONVERSATION/TURN' (all of a turn's files and attachments).
             */
            targets: string[];
            /**
             * Into
             * @description A folder relative to the server's workspace (empty: the workspace itself).
             * @default
             */
            into?: string;
        };
        /**
         * PullItem
         * @description The outcome for one file (or for a target that yielded no file): where it went, or why
         *     it was not pulled.
         */
        PullItem: {
            /** Target */
            target: string;
            /**
             * Status
             * @enum {string}
             */
            status: "pulled" | "unchanged" | "expired" | "refused" | "conflict" | "unsafe" | "not_hosted" | "invalid";
            /**
             * Kind
             * @default file
             * @enum {string}
             */
            kind?: "file" | "attachment";
            /** Ref */
            ref?: string | null;
            /** Path */
            path?: string | null;
            /** Sha256 */
            sha256?: string | null;
            /** Size */
            size?: number | null;
            /** Expires At */
            expires_at?: string | null;
            /**
             * Message
             * @default
             */
            message?: string;
        };
        /**
         * QueryOptions
         * @description One search's options, without the principal (``POST /v1/search``'s body).
         */
        QueryOptions: {
            /**
             * Id
             * @description Echoed back, to match answers.
             */
            id?: string | number | null;
            /**
             * Query
             * @description What to look for.
             */
            query: string;
            /**
             * User
             * @description The user an analyst looks at (an end user may only name itself).
             */
            user?: string | null;
            /**
             * Scope
             * @description conversation, user or tenant.
             * @default user
             * @enum {string}
             */
            scope?: "conversation" | "user" | "tenant";
            /** Conversation */
            conversation?: string | null;
            /**
             * Roles
             * @description Roles to search (default user, assistant, summary, anchor, attachment).
             */
            roles?: string[] | string | null;
            /**
             * Role
             * @description Same as roles.
             */
            role?: string[] | string | null;
            /**
             * K
             * @description Number of turns to return.
             * @default 10
             */
            k?: number;
            /**
             * Since
             * @description Only turns at or after (ISO).
             */
            since?: string | null;
            /**
             * Until
             * @description Only turns before (ISO).
             */
            until?: string | null;
            /**
             * As Of
             * @description Evaluate as of this time (ISO).
             */
            as_of?: string | null;
            /**
             * Half Life Days
             * @default 7
             */
            half_life_days?: number;
            /**
             * Recency Weight
             * @default 1
             */
            recency_weight?: number;
            /**
             * Time Weight
             * @description Turns in a time the query names ("in May 2023", "on 3 June", "last week") rank up to 1 + this many times higher, less with each 3 days outside it (0 reads no time from the query).
             * @default 4
             */
            time_weight?: number;
            /**
             * No Semantic
             * @default false
             */
            no_semantic?: boolean;
            /**
             * No Lexical
             * @default false
             */
            no_lexical?: boolean;
            /**
             * No Trigram
             * @default false
             */
            no_trigram?: boolean;
            /** Max Per Conversation */
            max_per_conversation?: number | null;
            /**
             * Snippets
             * @default both
             * @enum {string}
             */
            snippets?: "user" | "assistant" | "both" | "none";
            /** Weights */
            weights?: {
                [key: string]: number;
            } | null;
            /** Fusion */
            fusion?: ("rrf" | "rrf_score") | null;
            /**
             * Neighbour Weight
             * @description How much a turn gains from a matching previous or next turn of its conversation, as a share of that turn's fused value; a turn alone in its conversation gains that share of its own (0 turns it off).
             * @default 0.5
             */
            neighbour_weight?: number;
            /**
             * Coverage Gain
             * @description Each lexical match votes with the lexical weight times the square of this many times the share of the query's word weight the turn holds (0 keeps the weight fixed).
             * @default 2
             */
            coverage_gain?: number;
            /**
             * Min Relevance
             * @description Drop hits whose relevance is below this (0 keeps every hit). The default returns no hit for a query nothing in the history matches.
             * @default 0.5
             */
            min_relevance?: number;
            /**
             * Agent
             * @description Only conversations this agent recorded (codex, claude-code, gemini-cli, ...).
             */
            agent?: string | null;
            /**
             * App
             * @description Only conversations of this app.
             */
            app?: string | null;
        };
        /**
         * RecordAnswer
         * @description ``POST /v1/turns``: sent once every accepted turn is durable.
         */
        RecordAnswer: {
            /** Accepted */
            accepted: number;
            /** Duplicates */
            duplicates: number;
            /** Rejected */
            rejected: number;
            /** Turns */
            turns: components["schemas"]["TurnOutcome"][];
        };
        /**
         * ResolvedRecord
         * @description What a non-file address resolves to: the object (``value``) and where it lives.
         */
        ResolvedRecord: {
            /**
             * Address
             * @description The canonical address, with the turn's edition.
             */
            address: string;
            /**
             * Namespace
             * @description ar, tc, so, ws, su or ev.
             */
            namespace: string;
            /**
             * Kind
             * @description record, completion, submissions, attachments, citations, steps, events, or the search row's role.
             */
            kind: string;
            /**
             * Index
             * @description Position in the turn's list (a row's or event's seq); null for a single object.
             */
            index?: number | null;
            /** Tenant */
            tenant: string;
            /** User Id */
            user_id: string;
            /** Conversation Id */
            conversation_id: string;
            /** Turn Id */
            turn_id: string;
            /**
             * Edition
             * @description Which recording of the turn the object belongs to.
             */
            edition: string;
            /**
             * Expires At
             * Format: date-time
             */
            expires_at: string;
            /**
             * Value
             * @description The object as JSON: the materialized turn for conv:ar:...record, else the part, step, row or event.
             */
            value: unknown;
        };
        /**
         * SearchAnswer
         * @description A search's answer: ``search --json`` and ``POST /v1/search``.
         */
        SearchAnswer: {
            /** Hits */
            hits: components["schemas"]["Hit"][];
            /** Warnings */
            warnings?: string[];
            /**
             * Named Times
             * @description Times the query names; turns in them rank higher.
             */
            named_times?: components["schemas"]["NamedTimeAnswer"][];
            /** Id */
            id?: string | number | null;
        };
        /**
         * TurnAddresses
         * @description The canonical addresses of a turn's objects (lake.addresses), each list aligned with
         *     the materialized turn's list of the same name; ``rows``: its live search rows'.
         */
        TurnAddresses: {
            /** Record */
            record: string;
            /** Completion */
            completion: string;
            /** Submissions */
            submissions: string[];
            /** Attachments */
            attachments: string[];
            /** Citations */
            citations: string[];
            /** Steps */
            steps: string[];
            /** Events */
            events: string[];
            /** Rows */
            rows: string[];
        };
        /**
         * TurnOutcome
         * @description What became of one turn of a recording request.
         */
        TurnOutcome: {
            /**
             * Index
             * @description 0-based position of the turn in the request: in `turns`, or among the NDJSON body's non-blank lines (a reason that names a line gives its physical line number, from 1, blank lines counted).
             */
            index: number;
            /**
             * Status
             * @enum {string}
             */
            status: "accepted" | "duplicate" | "rejected";
            /** Conversation Id */
            conversation_id?: string | null;
            /** Turn Id */
            turn_id?: string | null;
            /** Reason */
            reason?: string | null;
            /**
             * Field
             * @description Path of the first bad field.
             */
            field?: string | null;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    record_turns_v1_turns_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description One `turnlake.turn.v1` object, `{"turns": [...]}`, or NDJSON (`Content-Type: application/x-ndjson`, one turn object per line), at most the server's body limit (413 beyond it). Any other content type is refused with 415. */
        requestBody: {
            content: {
                "application/json": {
                    /**
                     * Schema
                     * @constant
                     */
                    schema: "turnlake.turn.v1";
                    /** Tenant */
                    tenant: string;
                    /** App */
                    app: string;
                    /** Agent */
                    agent: string;
                    /** User Id */
                    user_id: string;
                    /** Conversation Id */
                    conversation_id: string;
                    /** Turn Id */
                    turn_id: string;
                    /**
                     * Writer
                     * @enum {string}
                     */
                    writer: "minimal" | "rich";
                    /**
                     * Started At
                     * Format: date-time
                     */
                    started_at: string;
                    /**
                     * Ended At
                     * Format: date-time
                     */
                    ended_at: string;
                    /** Conversation Title */
                    conversation_title?: string | null;
                    /** Submissions */
                    submissions: {
                        /** Text */
                        text: string;
                        /**
                         * Event Type
                         * @enum {string}
                         */
                        event_type: "prompt" | "followup" | "steer";
                        /** Batch */
                        batch: number;
                        /**
                         * Arrived At
                         * Format: date-time
                         */
                        arrived_at: string;
                    }[];
                    /** Context Events */
                    context_events?: {
                        /** Kind */
                        kind: string;
                        /**
                         * At
                         * Format: date-time
                         */
                        at: string;
                        /** Data */
                        data?: {
                            [key: string]: unknown;
                        };
                    }[];
                    /** Attachments */
                    attachments?: {
                        /** Name */
                        name: string;
                        /** Mime */
                        mime: string;
                        /** Size */
                        size: number;
                        /** Ref */
                        ref?: string | null;
                        /** Text */
                        text?: string | null;
                    }[];
                    /** Steps */
                    steps?: {
                        /** Name */
                        name: string;
                        /**
                         * Status
                         * @enum {string}
                         */
                        status: "started" | "completed" | "failed";
                        /**
                         * At
                         * Format: date-time
                         */
                        at: string;
                        /** Detail */
                        detail?: string | null;
                    }[];
                    /** Hosted Files */
                    hosted_files?: {
                        /** Path */
                        path: string;
                        /** Mime */
                        mime: string;
                        /** Content B64 */
                        content_b64?: string | null;
                        /** Source Path */
                        source_path?: string | null;
                        /** Description */
                        description?: string | null;
                    }[];
                    /**
                     * Completion
                     * @description The one final assistant answer of the turn.
                     *
                     *     ``status`` says whether the assistant got to answer: a turn the user interrupted, or one
                     *     that failed, is still recorded (its prompts and steps are what the user did) and may then
                     *     have an empty ``text``. An empty text (whatever the status) makes no assistant search
                     *     row. Not checked against ``text``: records written before the field existed stay valid.
                     */
                    completion: {
                        /** Text */
                        text: string;
                        /**
                         * At
                         * Format: date-time
                         */
                        at: string;
                        /**
                         * Status
                         * @default completed
                         * @enum {string}
                         */
                        status?: "completed" | "interrupted" | "failed";
                    };
                    /** Summary */
                    summary?: string | null;
                    /** Anchors */
                    anchors?: string[];
                    /** Notes */
                    notes?: string[];
                    /** Citations */
                    citations?: {
                        /** Title */
                        title: string;
                        /** Url */
                        url: string;
                        /** Snippet */
                        snippet?: string | null;
                    }[];
                    /** Events */
                    events?: {
                        /** Type */
                        type: string;
                        /**
                         * At
                         * Format: date-time
                         */
                        at: string;
                        /** Data */
                        data?: {
                            [key: string]: unknown;
                        };
                    }[];
                    usage?: {
                        /** Tokens In */
                        tokens_in: number;
                        /** Tokens Out */
                        tokens_out: number;
                        /** Cost Usd */
                        cost_usd?: number | null;
                        /** Duration Ms */
                        duration_ms?: number | null;
                    } | null;
                    feedback?: {
                        /** Rating */
                        rating: number;
                        /** Comment */
                        comment?: string | null;
                    } | null;
                    /** Ttl Days */
                    ttl_days?: number | null;
                } | {
                    turns: {
                        /**
                         * Schema
                         * @constant
                         */
                        schema: "turnlake.turn.v1";
                        /** Tenant */
                        tenant: string;
                        /** App */
                        app: string;
                        /** Agent */
                        agent: string;
                        /** User Id */
                        user_id: string;
                        /** Conversation Id */
                        conversation_id: string;
                        /** Turn Id */
                        turn_id: string;
                        /**
                         * Writer
                         * @enum {string}
                         */
                        writer: "minimal" | "rich";
                        /**
                         * Started At
                         * Format: date-time
                         */
                        started_at: string;
                        /**
                         * Ended At
                         * Format: date-time
                         */
                        ended_at: string;
                        /** Conversation Title */
                        conversation_title?: string | null;
                        /** Submissions */
                        submissions: {
                            /** Text */
                            text: string;
                            /**
                             * Event Type
                             * @enum {string}
                             */
                            event_type: "prompt" | "followup" | "steer";
                            /** Batch */
                            batch: number;
                            /**
                             * Arrived At
                             * Format: date-time
                             */
                            arrived_at: string;
                        }[];
                        /** Context Events */
                        context_events?: {
                            /** Kind */
                            kind: string;
                            /**
                             * At
                             * Format: date-time
                             */
                            at: string;
                            /** Data */
                            data?: {
                                [key: string]: unknown;
                            };
                        }[];
                        /** Attachments */
                        attachments?: {
                            /** Name */
                            name: string;
                            /** Mime */
                            mime: string;
                            /** Size */
                            size: number;
                            /** Ref */
                            ref?: string | null;
                            /** Text */
                            text?: string | null;
                        }[];
                        /** Steps */
                        steps?: {
                            /** Name */
                            name: string;
                            /**
                             * Status
                             * @enum {string}
                             */
                            status: "started" | "completed" | "failed";
                            /**
                             * At
                             * Format: date-time
                             */
                            at: string;
                            /** Detail */
                            detail?: string | null;
                        }[];
                        /** Hosted Files */
                        hosted_files?: {
                            /** Path */
                            path: string;
                            /** Mime */
                            mime: string;
                            /** Content B64 */
                            content_b64?: string | null;
                            /** Source Path */
                            source_path?: string | null;
                            /** Description */
                            description?: string | null;
                        }[];
                        /**
                         * Completion
                         * @description The one final assistant answer of the turn.
                         *
                         *     ``status`` says whether the assistant got to answer: a turn the user interrupted, or one
                         *     that failed, is still recorded (its prompts and steps are what the user did) and may then
                         *     have an empty ``text``. An empty text (whatever the status) makes no assistant search
                         *     row. Not checked against ``text``: records written before the field existed stay valid.
                         */
                        completion: {
                            /** Text */
                            text: string;
                            /**
                             * At
                             * Format: date-time
                             */
                            at: string;
                            /**
                             * Status
                             * @default completed
                             * @enum {string}
                             */
                            status?: "completed" | "interrupted" | "failed";
                        };
                        /** Summary */
                        summary?: string | null;
                        /** Anchors */
                        anchors?: string[];
                        /** Notes */
                        notes?: string[];
                        /** Citations */
                        citations?: {
                            /** Title */
                            title: string;
                            /** Url */
                            url: string;
                            /** Snippet */
                            snippet?: string | null;
                        }[];
                        /** Events */
                        events?: {
                            /** Type */
                            type: string;
                            /**
                             * At
                             * Format: date-time
                             */
                            at: string;
                            /** Data */
                            data?: {
                                [key: string]: unknown;
                            };
                        }[];
                        usage?: {
                            /** Tokens In */
                            tokens_in: number;
                            /** Tokens Out */
                            tokens_out: number;
                            /** Cost Usd */
                            cost_usd?: number | null;
                            /** Duration Ms */
                            duration_ms?: number | null;
                        } | null;
                        feedback?: {
                            /** Rating */
                            rating: number;
                            /** Comment */
                            comment?: string | null;
                        } | null;
                        /** Ttl Days */
                        ttl_days?: number | null;
                    }[];
                };
                "application/x-ndjson": string;
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["RecordAnswer"];
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The body is over the server's limit. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The body's Content-Type is not one the route reads. */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    search_v1_search_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["QueryOptions"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SearchAnswer"];
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    catalog_v1_catalog_get: {
        parameters: {
            query?: {
                conversation?: string | null;
                /** @description Nth turn (1-based; -1 = last). */
                ordinal?: number | null;
                /** @description A phrase: "yesterday", "last week", "in March 2026", "3rd turn", "the last turn". */
                when?: string | null;
                /** @description The user an analyst looks at. */
                user?: string | null;
                /** @description Evaluate as of this time (ISO 8601). */
                as_of?: string | null;
                /** @description Items per page; the answer's next_cursor asks for the next page. */
                limit?: number;
                /** @description The next_cursor of the previous page (absent: the first page). */
                cursor?: string | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["CatalogAnswer"];
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description Nothing of that name the key may read. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    conversations_v1_conversations_get: {
        parameters: {
            query?: {
                /** @description The user an analyst looks at. */
                user?: string | null;
                /** @description Evaluate as of this time (ISO 8601). */
                as_of?: string | null;
                /** @description Items per page; the answer's next_cursor asks for the next page. */
                limit?: number;
                /** @description The next_cursor of the previous page (absent: the first page). */
                cursor?: string | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ConversationsAnswer"];
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description Nothing of that name the key may read. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    turn_v1_conversations__conversation__turns__turn__get: {
        parameters: {
            query?: {
                /** @description Evaluate as of this time (ISO 8601). */
                as_of?: string | null;
            };
            header?: never;
            path: {
                conversation: string;
                turn: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The turn. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["MaterializedTurn"];
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description Nothing of that name the key may read. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    erase_conversation_v1_conversations__conversation__delete: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                conversation: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErasureAnswer"];
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description Nothing of that name the key may read. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    erase_user_v1_users__user__delete: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                user: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErasureAnswer"];
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description Nothing of that name the key may read. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    resolve_ref_v1_refs__ref__get: {
        parameters: {
            query?: {
                /** @description Evaluate as of this time (ISO 8601). */
                as_of?: string | null;
            };
            header?: never;
            path: {
                ref: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description JSON for a record, step, search row or event; the bytes of a conv:fi: file. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ResolvedRecord"];
                    "application/octet-stream": unknown;
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description Nothing of that name the key may read. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The object existed but is past its expiry. */
            410: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    pull_v1_pull_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["PullBody"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["PullAnswer"];
                };
            };
            /** @description The request is invalid; `field` names the part at fault. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description No API key, or one the server does not know. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The key may not do this, or read this. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The request does not fit its model; `field` names the first bad field. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The server failed; its log has the details. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
            /** @description The lake, an index or the model is unavailable now; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorAnswer"];
                };
            };
        };
    };
    healthz_healthz_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        [key: string]: unknown;
                    };
                };
            };
        };
    };
    readyz_readyz_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": unknown;
                };
            };
            /** @description still starting up: the body says which phase and how far */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
        };
    };
    metrics_metrics_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": unknown;
                };
            };
        };
    };
}
